package upstream

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/openengine/edge/backend"
	"github.com/openengine/edge/internal/poll"
	"github.com/openengine/edge/internal/testnats"
)

// freezer is a TCP proxy on 127.0.0.1 in front of addr whose connections
// can be frozen: they stay open and carry nothing more either way, as a
// stalled server or a partition leaves them. Connections made after a
// freeze flow.
type freezer struct {
	ln     net.Listener
	mu     sync.Mutex
	conns  []net.Conn    // guarded by mu
	frozen chan struct{} // guarded by mu: closed by freeze
	wg     sync.WaitGroup
}

func startFreezer(t *testing.T, addr string) *freezer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &freezer{ln: ln, frozen: make(chan struct{})}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", addr)
			if err != nil {
				c.Close()
				continue
			}
			f.mu.Lock()
			f.conns = append(f.conns, c, s)
			frozen := f.frozen
			f.mu.Unlock()
			f.wg.Add(2)
			go f.pipe(c, s, frozen)
			go f.pipe(s, c, frozen)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		f.mu.Lock()
		for _, c := range f.conns {
			c.Close()
		}
		f.mu.Unlock()
		f.wg.Wait()
	})
	return f
}

// pipe copies from src to dst until either fails or frozen is closed.
func (f *freezer) pipe(dst, src net.Conn, frozen chan struct{}) {
	defer f.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		select {
		case <-frozen:
			return // what it read is lost; the connections stay open
		default:
		}
		if n > 0 {
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// freeze stops the connections open now.
func (f *freezer) freeze() {
	f.mu.Lock()
	close(f.frozen)
	f.frozen = make(chan struct{})
	f.mu.Unlock()
}

// TestNATSUpstreamSilentStall is the regression test of issue 24 item 5's
// silent NATS stall: the connection to the NATS server stays open but
// carries nothing (a stalled server, a partition). nats.go's default ping
// interval is 2 minutes, so a call in flight waited for its timeout and new
// calls were published into the void for minutes. Pinging every second
// with 2 pings outstanding at most (wire.PingInterval, as the topics do),
// the call in flight fails UPSTREAM_UNAVAILABLE within 5 s and the link
// reconnects.
func TestNATSUpstreamSilentStall(t *testing.T) {
	ns := testnats.Start(t)
	fr := startFreezer(t, ns.Addr().String())
	// A worker that takes the call and never answers.
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := nc.QueueSubscribe("svc.slow", "svc", func(*nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	r, err := ParseURL("nats://" + fr.ln.Addr().String() + "/svc")
	if err != nil {
		t.Fatal(err)
	}
	u := New("n", []Replica{r}, Config{Timeout: time.Minute, BackoffMin: 10 * time.Millisecond, BackoffMax: 100 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	u.Start()
	defer u.Close()
	l := u.links[0]
	poll.Until(t, 5*time.Second, "the link up", func() (bool, string) { return l.isUp(), "down" })
	c := &natsCall{method: "slow", err: make(chan error, 1)}
	l.forward(c, 0)
	poll.Until(t, 5*time.Second, "the call published", func() (bool, string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		return len(l.pubs) == 0, "queued"
	})
	fr.freeze()
	select {
	case err := <-c.err:
		if !errors.Is(err, backend.ErrUpstreamUnavailable) {
			t.Fatalf("the call ended %v, want UPSTREAM_UNAVAILABLE", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the call in flight on the stalled connection did not fail within 5 s")
	}
	poll.Until(t, 5*time.Second, "the link up again", func() (bool, string) { return l.isUp(), "down" })
}
