package load

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// Window is the measured interval of a run on the generator clock (Now).
// Warm-up traffic before Start and drain traffic after End is not counted.
type Window struct{ Start, End int64 }

// In reports whether t falls inside the window.
func (w Window) In(t int64) bool { return t >= w.Start && t < w.End }

// Seconds is the window's length.
func (w Window) Seconds() float64 { return float64(w.End-w.Start) / 1e9 }

// Hooks let the caller sample server and generator resources at the edges
// of the measured window. Nil hooks are skipped.
type Hooks struct {
	OnStart func()
	OnEnd   func()
}

func (h Hooks) start() {
	if h.OnStart != nil {
		h.OnStart()
	}
}

func (h Hooks) end() {
	if h.OnEnd != nil {
		h.OnEnd()
	}
}

// Result is what one run measured inside its window.
type Result struct {
	Conns     int     `json:"conns"`
	Requests  int64   `json:"requests"`            // replies received in the window
	Errors    int64   `json:"errors"`              // error replies, any time
	Unmatched int64   `json:"unmatched,omitempty"` // replies whose id matched no request in flight
	Seconds   float64 `json:"seconds"`
	Rate      float64 `json:"rate"` // Requests / Seconds
	Latency   Latency `json:"latency"`
	// Open loop only: how late the generator sent requests after their
	// scheduled time (its own lag, included in Latency).
	SendLag *Latency `json:"send_lag,omitempty"`
	Sent    int64    `json:"sent,omitempty"`
	// Open or closed loop with Spin: seconds of the window the generator spent
	// polling with nothing to do (included in its CPU time).
	SpinIdle float64 `json:"spin_idle_s,omitempty"`
	Skipped  int64   `json:"skipped,omitempty"` // open loop: not sent: the connection had openRing outstanding, its socket took no more, or the server had closed it
	// Fan-out only.
	Deliveries   int64    `json:"deliveries,omitempty"`
	Published    int64    `json:"published,omitempty"`
	Lost         int64    `json:"lost,omitempty"` // fan-out: deliveries of window events that never arrived
	Subscribers  int      `json:"subscribers,omitempty"`
	ClosedByPeer int64    `json:"closed_by_peer,omitempty"` // open loop: connections the server closed; fan-out: subscriptions it closed
	PublishRTT   *Latency `json:"publish_rtt,omitempty"`    // the publisher's request round trip
}

// TLSDials bounds the wss:// dials DialMany has in flight. A server with a
// bounded handshake pool may close the connections that find it full
// instead of queueing them (edge: --handshake-pool, at least 16 by
// default); a Dial returns only after the upgrade, so after the server's
// handshake, and never holds more than one of its handshakes.
const TLSDials = 8

// DialMany opens n connections with at most conc dials in flight (at most
// TLSDials for wss://). It returns the connections that were established;
// err is the first failure, and failed counts them all.
func DialMany(ctx context.Context, t Target, n, conc, readBuf int, progress func(done int)) (conns []*Conn, failed int, err error) {
	if t.TLS != nil {
		conc = min(conc, TLSDials)
	}
	conc = max(min(conc, n), 1)
	out := make([]*Conn, n)
	var (
		next  atomic.Int64
		done  atomic.Int64
		mu    sync.Mutex
		first error
		nfail int
		wg    sync.WaitGroup
	)
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				c, err := Dial(ctx, t, readBuf)
				if err != nil {
					mu.Lock()
					nfail++
					if first == nil {
						first = err
					}
					mu.Unlock()
					continue
				}
				out[i] = c
				d := done.Add(1)
				if progress != nil {
					progress(int(d))
				}
			}
		}()
	}
	wg.Wait()
	for _, c := range out {
		if c != nil {
			conns = append(conns, c)
		}
	}
	if first == nil && ctx.Err() != nil {
		first = ctx.Err()
		nfail = n - len(conns)
	}
	return conns, nfail, first
}

// CloseAll closes every connection without a closing handshake.
func CloseAll(conns []*Conn) {
	for _, c := range conns {
		c.Close()
	}
}

// sleepUntil waits until t on the generator clock or until ctx is done.
func sleepUntil(ctx context.Context, t int64) error {
	d := time.Duration(t - Now())
	if d <= 0 {
		return ctx.Err()
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// unblock makes every blocked read of conns return, so that reader
// goroutines exit.
func unblock(conns []*Conn) {
	past := time.Now().Add(-time.Second)
	for _, c := range conns {
		c.nc.SetReadDeadline(past)
	}
}

// isTimeout reports whether err is a deadline error (how stopped readers end).
func isTimeout(err error) bool {
	var ne interface{ Timeout() bool }
	return errors.As(err, &ne) && ne.Timeout()
}
