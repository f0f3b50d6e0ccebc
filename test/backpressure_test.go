package test

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestSlowReaderGetsEverything checks that outbound backpressure (CONTRACT.md
// section 6) loses nothing: a client that sends many requests with large
// answers and does not read for a while pushes the connection over its
// outbound soft cap, so the server stops reading; once the client reads,
// every answer arrives and the connection keeps serving.
func TestSlowReaderGetsEverything(t *testing.T) {
	gw := startGateway(t)
	c := dial(t, gw)
	const n = 40
	pad := strings.Repeat("y", 128<<10)
	var want []string
	var reqs []byte
	for i := range n {
		id := strconv.Itoa(i)
		reqs = append(reqs, textFrame(`{"jsonrpc":"2.0","id":`+id+`,"method":"edge/echo","params":{"pad":"`+pad+`"}}`)...)
		want = append(want, `{"jsonrpc":"2.0","id":`+id+`,"result":{"pad":"`+pad+`"}}`)
	}
	written := make(chan error, 1)
	go func() {
		// May block while the server does not read: that is the backpressure.
		c.conn.SetWriteDeadline(time.Now().Add(pollTimeout))
		_, err := c.conn.Write(reqs)
		written <- err
	}()
	// Not reading for a moment lets the backlog build up; the assertions
	// below hold whatever its size.
	time.Sleep(300 * time.Millisecond)
	c.expectTexts(want...)
	if err := <-written; err != nil {
		t.Fatalf("write: %v", err)
	}
	c.echo()
	c.expectSettled(0, 0)
}
