package loop

// DefaultRateCloseAfter is the default of Config.RateCloseAfter.
const DefaultRateCloseAfter = 1000

// rateBucket is a connection's token bucket for --rate-limit (CONTRACT.md
// section 11.4): RateLimit tokens a second, at most RateBurst held. It is
// loop-owned, counted without locks or atomics, and refilled from the
// turn's clock.
type rateBucket struct {
	tokens  float64 // available messages
	at      int64   // unix nanoseconds of the last refill; 0: never filled
	refused int     // refusals in a row
}

// allow takes one token for a message arriving at now, and reports whether
// there was one. Always true when the limit is off.
func (b *rateBucket) allow(cfg *Config, now int64) bool {
	if cfg.RateLimit <= 0 {
		return true
	}
	burst := float64(cfg.RateBurst)
	if b.at == 0 {
		b.tokens = burst
	} else if dt := now - b.at; dt > 0 {
		b.tokens = min(burst, b.tokens+float64(dt)*float64(cfg.RateLimit)/1e9)
	}
	b.at = now
	if b.tokens >= 1 {
		b.tokens--
		b.refused = 0
		return true
	}
	b.refused++
	return false
}

// rateLimited handles a message over the rate limit: a request gets
// RATE_LIMITED without reaching a backend, anything else is dropped, and
// after RateCloseAfter refusals in a row the connection is closed with 1008
// "rate limit exceeded".
func (w *conn) rateLimited(msg []byte) {
	w.sess.HandleRateLimited(msg)
	if w.x.rate.refused >= w.cfg().RateCloseAfter {
		w.closeFor(causeRateLimited)
	}
}

// pass applies the per-message checks of a gated connection (one whose
// identity expires or that has a rate limit; the rest skip this call) and
// reports whether msg may reach the session: a text frame at or after the
// identity's expiry closes the connection 4401 and reaches no backend
// (CONTRACT.md section 11.3), one over the rate limit is refused (11.4).
func (w *conn) pass(msg []byte) bool {
	now := w.l.readAt
	if w.identityExpired(now) {
		w.closeFor(causeIdentityExpired)
		return false
	}
	if !w.more().rate.allow(w.cfg(), now) {
		w.rateLimited(msg)
		return false
	}
	return true
}
