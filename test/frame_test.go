package test

import (
	"bufio"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gobwas/ws"
)

// TestProtocolViolations sends each RFC 6455 violation of CONTRACT.md section
// 1.1 and expects the server's close frame with its code, then the end of the
// TCP connection. Each case writes its bytes in one piece and nothing after
// them, so the server never closes with unread input (which would reset the
// connection instead of ending it).
func TestProtocolViolations(t *testing.T) {
	gw := startGateway(t) // every case on its own connection
	text := []byte(`{"jsonrpc":"2.0","id":1,"method":"edge/echo","params":{}}`)
	cat := func(frames ...[]byte) []byte {
		var b []byte
		for _, f := range frames {
			b = append(b, f...)
		}
		return b
	}
	closeFrame := func(p []byte) []byte { return frame(true, ws.OpClose, p, true, 0) }
	tests := []struct {
		name   string
		bytes  []byte
		before []string // replies expected ahead of the close
		code   ws.StatusCode
		reason string // checked when not empty
	}{
		{name: "binary", bytes: frame(true, ws.OpBinary, []byte("x"), true, 0),
			code: ws.StatusUnsupportedData, reason: "binary frames are not supported"},
		{name: "binary first fragment", bytes: frame(false, ws.OpBinary, []byte("x"), true, 0),
			code: ws.StatusUnsupportedData, reason: "binary frames are not supported"},
		{name: "empty binary", bytes: frame(true, ws.OpBinary, nil, true, 0),
			code: ws.StatusUnsupportedData, reason: "binary frames are not supported"},
		{name: "unmasked text", bytes: frame(true, ws.OpText, text, false, 0), code: ws.StatusProtocolError},
		{name: "unmasked ping", bytes: frame(true, ws.OpPing, []byte("p"), false, 0), code: ws.StatusProtocolError},
		{name: "rsv1", bytes: frame(true, ws.OpText, text, true, ws.Rsv(true, false, false)), code: ws.StatusProtocolError},
		{name: "rsv2", bytes: frame(true, ws.OpText, text, true, ws.Rsv(false, true, false)), code: ws.StatusProtocolError},
		{name: "rsv3", bytes: frame(true, ws.OpText, text, true, ws.Rsv(false, false, true)), code: ws.StatusProtocolError},
		{name: "rsv on ping", bytes: frame(true, ws.OpPing, nil, true, ws.Rsv(true, false, false)), code: ws.StatusProtocolError},
		{name: "opcode 3", bytes: frame(true, ws.OpCode(3), text, true, 0), code: ws.StatusProtocolError},
		{name: "opcode 7", bytes: frame(true, ws.OpCode(7), nil, true, 0), code: ws.StatusProtocolError},
		{name: "opcode 0xB", bytes: frame(true, ws.OpCode(0xB), nil, true, 0), code: ws.StatusProtocolError},
		{name: "opcode 0xF", bytes: frame(true, ws.OpCode(0xF), []byte("x"), true, 0), code: ws.StatusProtocolError},
		{name: "fragmented ping", bytes: frame(false, ws.OpPing, []byte("p"), true, 0), code: ws.StatusProtocolError},
		{name: "fragmented close", bytes: frame(false, ws.OpClose, closeBody(1000, ""), true, 0), code: ws.StatusProtocolError},
		{name: "126-byte ping", bytes: frame(true, ws.OpPing, make([]byte, 126), true, 0), code: ws.StatusProtocolError},
		{name: "126-byte pong", bytes: frame(true, ws.OpPong, make([]byte, 126), true, 0), code: ws.StatusProtocolError},
		{name: "126-byte close", bytes: closeFrame(closeBody(1000, strings.Repeat("r", 124))), code: ws.StatusProtocolError},
		{name: "continuation without start", bytes: frame(true, ws.OpContinuation, text, true, 0), code: ws.StatusProtocolError},
		{name: "continuation after complete message",
			bytes: cat(frame(true, ws.OpText, []byte(`{}`), true, 0), frame(false, ws.OpContinuation, []byte("x"), true, 0)),
			// The answer to the complete message goes out before the close.
			before: []string{`{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid Request"}}`},
			code:   ws.StatusProtocolError},
		{name: "text inside fragmented message",
			bytes: cat(frame(false, ws.OpText, text[:10], true, 0), frame(true, ws.OpText, text[10:], true, 0)),
			code:  ws.StatusProtocolError},
		{name: "binary inside fragmented message",
			bytes: cat(frame(false, ws.OpText, text[:10], true, 0), frame(true, ws.OpBinary, text[10:], true, 0)),
			code:  ws.StatusProtocolError},
		{name: "close 1-byte payload", bytes: closeFrame([]byte{0x03}), code: ws.StatusProtocolError},
		{name: "close code 0", bytes: closeFrame(closeBody(0, "")), code: ws.StatusProtocolError},
		{name: "close code 999", bytes: closeFrame(closeBody(999, "")), code: ws.StatusProtocolError},
		{name: "close code 1004", bytes: closeFrame(closeBody(1004, "")), code: ws.StatusProtocolError},
		{name: "close code 1005", bytes: closeFrame(closeBody(1005, "")), code: ws.StatusProtocolError},
		{name: "close code 1006", bytes: closeFrame(closeBody(1006, "")), code: ws.StatusProtocolError},
		{name: "close code 1015", bytes: closeFrame(closeBody(1015, "")), code: ws.StatusProtocolError},
		{name: "close code 2999", bytes: closeFrame(closeBody(2999, "")), code: ws.StatusProtocolError},
		{name: "close code 5000", bytes: closeFrame(closeBody(5000, "")), code: ws.StatusProtocolError},
		{name: "close code 65535", bytes: closeFrame(closeBody(65535, "")), code: ws.StatusProtocolError},
		{name: "close reason invalid utf-8", bytes: closeFrame(closeBody(1000, "ok\xff")), code: ws.StatusInvalidFramePayloadData},
		{name: "close reason surrogate", bytes: closeFrame(closeBody(1000, "\xed\xa0\x80")), code: ws.StatusInvalidFramePayloadData},
		{name: "text invalid utf-8", bytes: textFrame(`{"jsonrpc":"2.0","id":1,"method":"edge/echo","params":{"s":"` + "\xff" + `"}}`),
			code: ws.StatusInvalidFramePayloadData},
		{name: "text overlong encoding", bytes: textFrame("\xc0\xaf"), code: ws.StatusInvalidFramePayloadData},
		// The JSON is already broken before the bad byte: still 1007, not -32700.
		{name: "text invalid utf-8 after a JSON error", bytes: textFrame(`{"a":,"b":"` + "\xff" + `"}`),
			code: ws.StatusInvalidFramePayloadData},
		{name: "text invalid utf-8 outside strings", bytes: textFrame(`{"jsonrpc":"2.0"}` + "\xff"),
			code: ws.StatusInvalidFramePayloadData},
		{name: "text truncated code point", bytes: textFrame("abc\xe2\x82"), code: ws.StatusInvalidFramePayloadData},
		{name: "text invalid utf-8 split across fragments",
			// U+20AC is E2 82 AC: the first fragment ends inside it, the
			// second continues with a byte that cannot follow.
			bytes: cat(frame(false, ws.OpText, []byte("\"\xe2\x82"), true, 0), frame(true, ws.OpContinuation, []byte("(\""), true, 0)),
			code:  ws.StatusInvalidFramePayloadData},
		{name: "text ends inside code point across fragments",
			bytes: cat(frame(false, ws.OpText, []byte("\"ab"), true, 0), frame(true, ws.OpContinuation, []byte("\"\xe2\x82"), true, 0)),
			code:  ws.StatusInvalidFramePayloadData},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := dial(t, gw)
			c.write(tt.bytes)
			c.expectTexts(tt.before...)
			reason := c.expectClose(tt.code)
			if tt.reason != "" && reason != tt.reason {
				t.Errorf("close reason %q, want %q", reason, tt.reason)
			}
			c.answerCloseAndExpectEOF()
		})
	}
}

// TestInvalidUTF8FailsFast checks that invalid UTF-8 closes the connection
// with 1007 as soon as the offending byte arrives (CONTRACT.md section 1.1:
// "as early as the bytes allow"), although the message never completes.
func TestInvalidUTF8FailsFast(t *testing.T) {
	gw := startGateway(t)
	t.Run("fragment without FIN", func(t *testing.T) {
		c := dial(t, gw)
		c.sendFrame(false, ws.OpText, []byte(`{"jsonrpc":"2.0",`), true)
		c.sendFrame(false, ws.OpContinuation, []byte(`"id":"`+"\xff"), true)
		// No further fragment, no FIN.
		c.expectClose(ws.StatusInvalidFramePayloadData)
		c.answerCloseAndExpectEOF()
	})
	t.Run("partial frame", func(t *testing.T) {
		c := dial(t, gw)
		// A frame declaring 1000 bytes of which only the first 20 arrive,
		// with a byte that no continuation can make valid.
		f := frame(true, ws.OpText, []byte(`{"a":"`+"\xf5"+strings.Repeat("x", 993)), true, 0)
		hdr := len(f) - 1000
		c.write(f[:hdr+20])
		c.expectClose(ws.StatusInvalidFramePayloadData)
		c.answerCloseAndExpectEOF()
	})
	t.Run("continuation byte split from its lead", func(t *testing.T) {
		c := dial(t, gw)
		c.sendFrame(false, ws.OpText, []byte("\"\xf0\x9f"), true)
		c.expectNoMessage() // a valid prefix so far: nothing may happen
		c.sendFrame(false, ws.OpContinuation, []byte("\x41"), true)
		c.expectClose(ws.StatusInvalidFramePayloadData)
		c.answerCloseAndExpectEOF()
	})
}

// TestInvalidUTF8AfterValidMessage: a whole text frame's UTF-8 is checked
// along with its JSON (codec.Reader.DeferUTF8), so a message before it in
// the same TCP segment keeps the answer it already got (edge/stats and a parse
// error are answered inline), and the bad one closes with 1007, never gets
// -32700.
func TestInvalidUTF8AfterValidMessage(t *testing.T) {
	gw := startGateway(t)
	c := dial(t, gw)
	c.write(append(append(textFrame(`{"jsonrpc":"2.0","id":1,"method":"edge/stats","params":{}}`),
		textFrame(`{"é":`)...),
		textFrame(`{"jsonrpc":"2.0","id":2,"method":"edge/echo","params":{"a":"`+"\xe9"+`"}}`)...))
	c.expectText(`{"jsonrpc":"2.0","id":1,"result":{"inFlightIds":0,"tasks":0,"subscriptions":0,"outboundBytes":0}}`)
	c.expectText(`{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}`)
	c.expectClose(ws.StatusInvalidFramePayloadData)
	c.answerCloseAndExpectEOF()
}

// TestUTF8SplitAcrossFragments checks that a valid code point split across
// fragments and TCP writes is reassembled and accepted.
func TestUTF8SplitAcrossFragments(t *testing.T) {
	gw := startGateway(t)
	c := dial(t, gw)
	msg := []byte(`{"jsonrpc":"2.0","id":1,"method":"edge/echo","params":{"s":"€😀é"}}`)
	at := strings.Index(string(msg), "€") + 1 // inside the euro sign
	at2 := strings.Index(string(msg), "😀") + 2
	c.sendFrame(false, ws.OpText, msg[:at], true)
	c.sendFrame(false, ws.OpContinuation, msg[at:at2], true)
	// The last fragment is written a byte at a time.
	last := frame(true, ws.OpContinuation, msg[at2:], true, 0)
	for i := range last {
		c.write(last[i : i+1])
	}
	c.expectText(`{"jsonrpc":"2.0","id":1,"result":{"s":"€😀é"}}`)
}

// TestPingBetweenFragments checks that a ping inside a fragmented message gets
// its pong, with the same payload, before the message's response.
func TestPingBetweenFragments(t *testing.T) {
	gw := startGateway(t)
	c := dial(t, gw)
	msg := []byte(`{"jsonrpc":"2.0","id":"f","method":"edge/echo","params":{"k":"v"}}`)
	c.sendFrame(false, ws.OpText, msg[:20], true)
	c.sendFrame(true, ws.OpPing, []byte("ping-1"), true)
	c.sendFrame(false, ws.OpContinuation, msg[20:40], true)
	c.sendFrame(true, ws.OpPing, []byte(strings.Repeat("p", 125)), true)
	c.sendFrame(true, ws.OpPong, []byte("unsolicited"), true) // ignored
	c.sendFrame(true, ws.OpContinuation, msg[40:], true)
	for _, want := range []string{"ping-1", strings.Repeat("p", 125)} {
		op, p := c.readMessage()
		if op != ws.OpPong || string(p) != want {
			t.Fatalf("got %s, want pong %q", describe(op, p), want)
		}
	}
	c.expectText(`{"jsonrpc":"2.0","id":"f","result":{"k":"v"}}`)
	// An empty ping outside a message.
	c.sendFrame(true, ws.OpPing, nil, true)
	if op, p := c.readMessage(); op != ws.OpPong || len(p) != 0 {
		t.Fatalf("got %s, want an empty pong", describe(op, p))
	}
}

// TestClientClose checks that a peer close is answered with a close frame
// echoing its code and that the server then ends the TCP connection
// (CONTRACT.md section 1.1, RFC 6455 sections 5.5.1 and 7.1.1).
func TestClientClose(t *testing.T) {
	gw := startGateway(t)
	tests := []struct {
		name string
		body []byte
		want []byte // the server's close payload
	}{
		{name: "1000 with reason", body: closeBody(1000, "bye"), want: closeBody(1000, "")},
		{name: "1001", body: closeBody(1001, ""), want: closeBody(1001, "")},
		{name: "3000", body: closeBody(3000, "app"), want: closeBody(3000, "")},
		{name: "4999", body: closeBody(4999, ""), want: closeBody(4999, "")},
		{name: "empty body", body: nil, want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := dial(t, gw)
			c.echo()
			c.sendFrame(true, ws.OpClose, tt.body, true)
			op, p := c.readMessage()
			if op != ws.OpClose {
				t.Fatalf("got %s, want close", describe(op, p))
			}
			// The reason is free; the code must be echoed.
			if len(tt.want) == 0 && len(p) != 0 || len(tt.want) > 0 && (len(p) < 2 || string(p[:2]) != string(tt.want)) {
				t.Fatalf("got %s, want close payload %q...", describe(op, p), tt.want)
			}
			c.expectEOF()
		})
	}
	t.Run("close between fragments", func(t *testing.T) {
		c := dial(t, gw)
		c.sendFrame(false, ws.OpText, []byte(`{"jsonrpc":`), true)
		c.sendFrame(true, ws.OpClose, closeBody(1000, ""), true)
		if got := c.expectClose(1000); got != "" {
			t.Logf("close reason %q", got)
		}
		c.expectEOF()
	})
	t.Run("request in flight", func(t *testing.T) {
		// Closing a connection cancels its backend work and frees every slot
		// (CONTRACT.md section 6): the gate loses its waiter.
		c := dial(t, gw)
		c.sendText(gate("1", "client-close"))
		gw.waitGate("client-close", 1)
		c.sendFrame(true, ws.OpClose, closeBody(1000, ""), true)
		c.expectClose(1000)
		c.expectEOF()
		gw.waitGate("client-close", 0)
	})
}

// TestByteAtATime writes a fragmented message with a ping between its
// fragments, then a second message, one byte per write: every frame header,
// masking key and payload is split across reads.
func TestByteAtATime(t *testing.T) {
	gw := startGateway(t)
	c := dial(t, gw)
	msg := []byte(`{"jsonrpc":"2.0","id":"b","method":"edge/echo","params":{"s":"héllo"}}`)
	var b []byte
	b = append(b, frame(false, ws.OpText, msg[:25], true, 0)...)
	b = append(b, frame(true, ws.OpPing, []byte("pp"), true, 0)...)
	b = append(b, frame(false, ws.OpContinuation, nil, true, 0)...) // an empty fragment
	b = append(b, frame(true, ws.OpContinuation, msg[25:], true, 0)...)
	b = append(b, textFrame(`{"jsonrpc":"2.0","id":"c","method":"edge/echo","params":{}}`)...)
	for i := range b {
		c.write(b[i : i+1])
	}
	if op, p := c.readMessage(); op != ws.OpPong || string(p) != "pp" {
		t.Fatalf("got %s, want pong %q", describe(op, p), "pp")
	}
	c.expectTexts(`{"jsonrpc":"2.0","id":"b","result":{"s":"héllo"}}`,
		`{"jsonrpc":"2.0","id":"c","result":{}}`)
}

// TestEchoModeChecksUTF8: the raw echo mode (the bench suite's ceiling)
// parses nothing, so it checks UTF-8 of whole frames itself: valid text is
// echoed byte for byte, invalid text closes with 1007.
func TestEchoModeChecksUTF8(t *testing.T) {
	gw := startGateway(t, func(c *gwConfig) { c.loop.Echo = true })
	c := dial(t, gw)
	c.write(append(textFrame("not json: é"), textFrame("bad \xe9 byte")...))
	c.expectText("not json: é")
	c.expectClose(ws.StatusInvalidFramePayloadData)
	c.answerCloseAndExpectEOF()
}

// TestPeerCloseKeepsQueuedOutput is the regression test of a peer close
// discarding what the same turn had already queued (hardening issue, item
// 6). Each case writes its bytes in one segment, so the close frame is
// decoded in the turn that queued the earlier answers: they go out before
// the close reply (CONTRACT.md section 1.1 discards queued frames only when
// the server itself decides to close). Before the fix the upgrade's 101, the
// pong and the stats answer were lost.
func TestPeerCloseKeepsQueuedOutput(t *testing.T) {
	gw := startGateway(t)
	closeFrame := frame(true, ws.OpClose, closeBody(1000, ""), true, 0)
	pingFrame := frame(true, ws.OpPing, []byte("p1"), true, 0)
	stats := textFrame(`{"jsonrpc":"2.0","id":"st","method":"edge/stats","params":{}}`)
	tests := []struct {
		name    string
		upgrade bool   // the upgrade request leads the segment
		frames  []byte // after the upgrade
		check   func(c *client)
	}{
		{name: "upgrade then close", upgrade: true, frames: closeFrame},
		{name: "upgrade, ping, close", upgrade: true, frames: append(append([]byte{}, pingFrame...), closeFrame...),
			check: func(c *client) {
				if op, p := c.readMessage(); op != ws.OpPong || string(p) != "p1" {
					t.Fatalf("got %s, want pong p1", describe(op, p))
				}
			}},
		{name: "stats then close", frames: append(append([]byte{}, stats...), closeFrame...),
			check: func(c *client) {
				c.expectText(`{"jsonrpc":"2.0","id":"st","result":{"inFlightIds":0,"tasks":0,"subscriptions":0,"outboundBytes":0}}`)
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c *client
			var seg []byte
			if tt.upgrade {
				conn := dialTCP(t, gw)
				c = &client{t: t, conn: conn, br: bufio.NewReader(conn)}
				seg = []byte(upgradeRequest(gw.addr, "/", testKey))
			} else {
				c = dial(t, gw)
			}
			c.write(append(seg, tt.frames...))
			if tt.upgrade {
				c.conn.SetReadDeadline(time.Now().Add(readTimeout))
				resp, err := http.ReadResponse(c.br, &http.Request{Method: http.MethodGet})
				if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
					t.Fatalf("upgrade answer: %v, %v; want 101 before the close", resp, err)
				}
			}
			if tt.check != nil {
				tt.check(c)
			}
			c.expectClose(1000)
			c.expectEOF()
		})
	}
}
