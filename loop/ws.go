package loop

import (
	"context"
	"errors"
	"log/slog"

	"github.com/gobwas/ws"

	"github.com/openengine/edge/codec"
)

// frames decodes WebSocket input: the upgrade request first, then frames.
// Returns the bytes used. Runs on the loop.
func (w *conn) frames(buf []byte) int {
	off := 0
	if w.proxyPending {
		off = w.proxyHeader(buf)
		if w.proxyPending || w.state != stateHandshake {
			return off
		}
	}
	if w.state == stateHandshake {
		off += w.handshake(buf[off:])
	}
	for w.state == stateOpen && !w.paused && off < len(buf) {
		ev, n, err := w.rd.Next(buf[off:])
		off += n
		if err != nil {
			w.fail(err)
			break
		}
		if ev.Kind == codec.EventNone {
			break
		}
		w.event(ev)
		if w.state == stateOpen && !w.Writable() {
			w.pause()
		}
	}
	if w.state == stateClosing {
		// After our close frame only the peer's close matters; everything else
		// is discarded.
		off = w.drainClosing(buf, off)
	}
	if int(w.parked) != w.rd.Buffered() {
		w.park()
	}
	return off
}

func (w *conn) event(ev codec.Event) {
	switch ev.Kind {
	case codec.EventText:
		if w.gated && !w.pass(ev.Payload) {
			return
		}
		if !ev.Unchecked {
			w.sess.HandleMessage(ev.Payload)
		} else if !w.sess.HandleUnchecked(ev.Payload) {
			w.fail(codec.ErrInvalidText)
			return
		}
		w.l.handled++
	case codec.EventPing:
		w.appendFrame(ws.OpPong, ev.Payload)
	case codec.EventPong:
	case codec.EventClose:
		// Answer the peer's close by echoing its code (RFC 6455 section 5.5.1);
		// then the server closes the TCP connection first (section 7.1.1).
		// What this turn already queued (the 101, a pong, answers) goes out
		// before it: only a close the server decides on discards output
		// (CONTRACT.md section 1.1).
		w.code = ev.Code
		w.out = w.output()
		if ev.Code == ws.StatusNoStatusRcvd {
			w.out = codec.AppendFrame(w.out, ws.OpClose, nil)
		} else {
			w.out = codec.AppendClose(w.out, ev.Code, "")
		}
		w.l.markDirty(w)
		w.sess.Close()
		w.setState(stateClosing)
		w.hangup = true
	}
}

// drainClosing discards input after the server's close frame, watching for the
// peer's close so that the TCP connection can be dropped early.
func (w *conn) drainClosing(buf []byte, off int) int {
	if w.hangup {
		return len(buf)
	}
	for off < len(buf) {
		ev, n, err := w.rd.Next(buf[off:])
		off += n
		if err != nil {
			// The stream cannot be framed any more: discard it until the peer
			// closes the TCP connection or CloseTimeout passes. Dropping the
			// connection now could reset it before the peer read our close.
			return len(buf)
		}
		if ev.Kind == codec.EventClose {
			w.hangup = true
			w.l.markDirty(w)
			return len(buf)
		}
		if ev.Kind == codec.EventNone {
			break
		}
	}
	return len(buf)
}

// handshake parses the HTTP upgrade request and answers it (CONTRACT.md
// section 1.1). Returns the bytes used.
func (w *conn) handshake(buf []byte) int {
	cfg := w.cfg()
	req, n, err := codec.ParseRequest(buf, cfg.MaxHeaderBytes)
	switch {
	case errors.Is(err, codec.ErrNeedMore):
		return 0
	case errors.Is(err, codec.ErrHeaderTooLarge):
		w.reject(rejectHeaderTooLarge)
		return len(buf)
	case err != nil:
		w.reject(rejectBadRequest)
		return len(buf)
	}
	if status := codec.CheckUpgrade(&req, cfg.WSPath); status != 101 {
		w.reject(rejectFor(status))
		return len(buf)
	}
	if w.viaProxy {
		w.forwarded(&req)
	}
	if w.overLimit() {
		w.reject(rejectLimit)
		return len(buf)
	}
	if !codec.OriginAllowed(&req, cfg.AllowOrigins) {
		w.reject(rejectOrigin)
		return len(buf)
	}
	if cfg.Auth != nil {
		id, err := cfg.Auth.Verify(bearerToken(&req, cfg.AuthQueryParam))
		if err != nil {
			w.reject(rejectUnauthorized)
			return len(buf)
		}
		x := w.more()
		x.who = &id
		if !id.Expires.IsZero() {
			x.expires = id.Expires.UnixNano()
		}
	}
	w.out = codec.AppendAccept(w.l.getBuf(), req.Key)
	w.l.markDirty(w)
	w.open()
	return n
}

// reject answers a failed upgrade with its HTTP error, if the reason has
// one, and closes.
func (w *conn) reject(r rejectReason) {
	w.l.counts.rejected[r]++
	if lg := w.cfg().Logger; lg.Enabled(context.Background(), slog.LevelDebug) {
		// The client's address (section 11.5), never the request.
		lg.Debug("connection refused", "remote", w.remote.String(), "reason", rejectReasons[r].label)
	}
	if status := rejectReasons[r].status; status != 0 {
		w.out = codec.AppendHTTPError(w.l.getBuf(), status)
	}
	w.setState(stateClosing)
	w.hangup = true
	w.l.markDirty(w)
}

// fail closes the connection for a decoding error with its close code
// (CONTRACT.md section 1.1).
func (w *conn) fail(err error) {
	var ce *codec.CloseError
	if !errors.As(err, &ce) {
		ce = &codec.CloseError{Code: ws.StatusProtocolError}
	}
	// Answers already queued this turn (to messages before the bad one) go
	// out ahead of the close frame.
	w.closeAfter(ce.Code, ce.Reason, true)
	// The stream cannot be framed any more, so the peer's close could not be
	// recognised: half-close after our close frame (RFC 6455 section 7.1.7) so
	// that the peer sees EOF at once, and drop the connection when it closes
	// too or CloseTimeout passes. A full close now could reset the connection
	// before the peer read our close frame.
	w.shutWrite = true
}
