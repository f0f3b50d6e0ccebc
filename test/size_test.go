package test

import (
	"strings"
	"testing"

	"github.com/gobwas/ws"
)

// echoOfSize returns an edge/echo request of exactly n bytes (n >= 100) and
// its response.
func echoOfSize(n int) (req, resp string) {
	const pre, post = `{"jsonrpc":"2.0","id":1,"method":"edge/echo","params":{"pad":"`, `"}}`
	pad := strings.Repeat("x", n-len(pre)-len(post))
	return pre + pad + post, `{"jsonrpc":"2.0","id":1,"result":{"pad":"` + pad + `"}}`
}

// fragments splits msg into a text frame and continuations of at most size
// bytes each, the last with FIN.
func fragments(msg []byte, size int) []byte {
	var out []byte
	op := ws.OpText
	for len(msg) > 0 {
		n := min(size, len(msg))
		out = append(out, frame(n == len(msg), op, msg[:n], true, 0)...)
		msg = msg[n:]
		op = ws.OpContinuation
	}
	return out
}

// TestMessageSizeLimit checks the text message limit (CONTRACT.md section
// 1.1): a message of exactly MaxMessageBytes is accepted, one byte more is
// closed with 1009 "message too big", decided from the frame header before
// the payload arrives, whether the message is one frame or many fragments.
func TestMessageSizeLimit(t *testing.T) {
	for _, limit := range []int{1 << 20, 4096} {
		name := "default 1MiB"
		if limit != 1<<20 {
			name = "4KiB"
		}
		t.Run(name, func(t *testing.T) {
			gw := startGateway(t, func(c *gwConfig) {
				if limit != 1<<20 {
					c.loop.MaxMessageBytes = limit
				}
			})
			req, resp := echoOfSize(limit)
			t.Run("exact limit, one frame", func(t *testing.T) {
				c := dial(t, gw)
				c.write(textFrame(req))
				c.expectText(resp)
			})
			t.Run("exact limit, one frame in many writes", func(t *testing.T) {
				c := dial(t, gw)
				f := textFrame(req)
				step := max(1, len(f)/97)
				for i := 0; i < len(f); i += step {
					c.write(f[i:min(i+step, len(f))])
				}
				c.expectText(resp)
			})
			t.Run("exact limit, many fragments", func(t *testing.T) {
				c := dial(t, gw)
				c.write(fragments([]byte(req), max(1, limit/61)))
				c.expectText(resp)
				c.echo()
			})
			t.Run("limit+1, header only", func(t *testing.T) {
				c := dial(t, gw)
				big, _ := echoOfSize(limit + 1)
				f := textFrame(big)
				hdr := len(f) - len(big)
				c.write(f[:hdr+10]) // the header and a few payload bytes
				if r := c.expectClose(ws.StatusMessageTooBig); r != "message too big" {
					t.Errorf("close reason %q, want %q", r, "message too big")
				}
				c.answerCloseAndExpectEOF()
			})
			t.Run("limit+1, many fragments", func(t *testing.T) {
				c := dial(t, gw)
				// Fragments of exactly the limit, then one more byte in a
				// final continuation: its header crosses the limit.
				body := []byte(req)
				step := max(1, limit/61)
				var b []byte
				for i := 0; i < len(body); i += step {
					b = append(b, frame(false, opFor(i), body[i:min(i+step, len(body))], true, 0)...)
				}
				b = append(b, frame(true, ws.OpContinuation, []byte(" "), true, 0)...)
				c.write(b)
				if r := c.expectClose(ws.StatusMessageTooBig); r != "message too big" {
					t.Errorf("close reason %q, want %q", r, "message too big")
				}
				c.answerCloseAndExpectEOF()
			})
			t.Run("limit+1, first fragment header", func(t *testing.T) {
				c := dial(t, gw)
				c.sendFrame(false, ws.OpText, []byte(`{`), true)
				big := frame(false, ws.OpContinuation, make([]byte, limit), true, 0)
				c.write(big[:len(big)-limit])
				c.expectClose(ws.StatusMessageTooBig)
				c.answerCloseAndExpectEOF()
			})
		})
	}
}

func opFor(i int) ws.OpCode {
	if i == 0 {
		return ws.OpText
	}
	return ws.OpContinuation
}
