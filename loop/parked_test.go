package loop

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/gobwas/ws"

	"github.com/openengine/edge/internal/poll"
)

// TestParkedMessagesGlobalCap is the regression test of issue 24 item 4's
// parked requests: a connection that sends most of a large message and
// then nothing holds it in its reassembly buffer, up to
// --max-message-bytes, and nothing bounded the sum over connections (10,000
// connections each 1 MB short of a message: 10 GB). With --max-parked-bytes
// 2 MiB, clients that each send 300 KiB of a 1 MiB message one after the
// other: each one whose buffer takes the total over the cap is closed with
// 1013 (and its bytes released), so the total never stays over the cap;
// once the others left, the first completes its message and it is echoed,
// and every byte is released once it closes.
func TestParkedMessagesGlobalCap(t *testing.T) {
	const (
		max     = 1 << 20
		clients = 6
		sent    = 300 << 10
	)
	s := startEcho(t, Config{MaxMessageBytes: max, MaxParkedBytes: 2 * max})
	frame := maskedText(bytes.Repeat([]byte("x"), max-1))
	hs := len(frame) - (max - 1)
	type peer struct {
		c      net.Conn
		events chan string // what the server sent: "close <code>" or "text <bytes>"
	}
	peers := make([]*peer, clients)
	closed := map[int]bool{}
	for i := range peers {
		c, err := net.Dial("tcp", s.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		if _, err := c.Write(upgradeRequest()); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(c)
		if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
			t.Fatalf("upgrade: %v %v", resp, err)
		}
		p := &peer{c: c, events: make(chan string, 4)}
		peers[i] = p
		go func() {
			defer close(p.events)
			for {
				h, err := ws.ReadHeader(br)
				if err != nil {
					return
				}
				body := make([]byte, h.Length)
				if _, err := io.ReadFull(br, body); err != nil {
					return
				}
				if h.OpCode == ws.OpClose && len(body) >= 2 {
					p.events <- fmt.Sprintf("close %d", int(body[0])<<8|int(body[1]))
					return
				}
				p.events <- fmt.Sprintf("text %d", len(body))
			}
		}()
		before := s.parked.Load()
		if _, err := c.Write(frame[:hs+sent]); err != nil {
			t.Fatal(err)
		}
		// Either all its bytes are absorbed and counted, or it is closed
		// 1013.
		poll.Until(t, 5*time.Second, fmt.Sprintf("client %d's partial message counted or refused", i), func() (bool, string) {
			select {
			case ev := <-p.events:
				if ev != "close 1013" {
					t.Fatalf("client %d got %q", i, ev)
				}
				closed[i] = true
				return true, ""
			default:
			}
			n := s.parked.Load()
			return n-before >= sent, fmt.Sprintf("%d bytes parked", n) // all of it absorbed
		})
		if n := s.parked.Load(); n > 2*max {
			t.Fatalf("after client %d: %d bytes parked, over the cap %d", i, n, 2*max)
		}
	}
	if len(closed) == 0 || len(closed) == clients {
		t.Fatalf("%d of %d clients closed 1013; %d bytes parked with a cap of %d", len(closed), clients, s.parked.Load(), 2*max)
	}
	// The others leave, and the first completes its message: echoed.
	first := -1
	for i, p := range peers {
		switch {
		case closed[i]:
		case first < 0:
			first = i
		default:
			p.c.Close()
		}
	}
	poll.Until(t, 5*time.Second, "the bytes of the clients that left released", func() (bool, string) {
		n := s.parked.Load()
		return n <= max/2, fmt.Sprintf("%d bytes parked", n)
	})
	if _, err := peers[first].c.Write(frame[hs+sent:]); err != nil {
		t.Fatal(err)
	}
	if ev := <-peers[first].events; ev != fmt.Sprintf("text %d", max-1) {
		t.Fatalf("client %d: got %q, want its message echoed", first, ev)
	}
	for _, p := range peers {
		p.c.Close()
	}
	poll.Until(t, 5*time.Second, "every parked byte released", func() (bool, string) {
		n := s.parked.Load()
		return n == 0, fmt.Sprintf("%d bytes parked", n)
	})
	if n := s.parkedClosed.Load(); n != uint64(len(closed)) {
		t.Fatalf("%d connections counted closed over the cap, want %d", n, len(closed))
	}
	t.Logf("%d of %d clients closed 1013", len(closed), clients)
}
