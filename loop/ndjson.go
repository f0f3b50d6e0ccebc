package loop

import "github.com/openengine/edge/codec"

// lines splits NDJSON input into messages (CONTRACT.md section 1.2). Returns
// the bytes used; a partial line stays in gnet's buffer until its newline
// arrives. Runs on the loop.
func (w *conn) lines(buf []byte) int {
	off := 0
	for w.state == stateOpen && !w.paused {
		line, kind, n := w.x.lr.Next(buf[off:])
		off += n
		switch kind {
		case codec.LineOK:
			if w.gated && !w.pass(line) {
				break
			}
			w.sess.HandleMessage(line)
			w.l.handled++
		case codec.LineTooLong:
			w.sess.HandleParseError()
		case codec.LineNone:
			if n == 0 {
				return off
			}
			continue
		}
		if w.state == stateOpen && !w.Writable() {
			w.pause()
		}
	}
	return off
}
