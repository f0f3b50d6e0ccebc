package upstream

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
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

// startNATSCall starts a nats:// upstream of prefix svc on the NATS server
// at addr (closed in t.Cleanup), waits for its link to be up, and forwards
// a call of method slow on it.
func startNATSCall(t *testing.T, addr string) (*Upstream, *link, *natsCall) {
	t.Helper()
	r, err := ParseURL("nats://" + addr + "/svc")
	if err != nil {
		t.Fatal(err)
	}
	u := New("n", []Replica{r}, Config{Timeout: time.Minute, BackoffMin: 10 * time.Millisecond, BackoffMax: 100 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	u.Start()
	t.Cleanup(u.Close)
	l := u.links[0]
	poll.Until(t, 5*time.Second, "the link up", func() (bool, string) { return l.isUp(), "down" })
	c := &natsCall{method: "slow", err: make(chan error, 1)}
	l.forward(c, 0)
	return u, l, c
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
	_, l, c := startNATSCall(t, fr.ln.Addr().String())
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

// TestNATSUpstreamSpoofedReplies is the regression test of issue 24 item
// 5's spoofed NATS replies: a call's reply subject (_INBOX.<nuid>.<id>) and
// a worker's probe subject (_INBOX.<nuid>.w.<worker>) are known to every
// worker that took a call of the link, and any client of the NATS server
// may publish on them. One no-responders status (503) on the reply subject
// of a call another worker took failed it UPSTREAM_UNAVAILABLE; one on the
// probe subject of a worker failed every call that worker held; an
// "accepted" or an answer from another worker was taken as the call's.
// Each is now dropped and counted, and the call is answered by the worker
// that took it.
func TestNATSUpstreamSpoofedReplies(t *testing.T) {
	ns := testnats.Start(t)
	connect := func() *nats.Conn {
		nc, err := nats.Connect(ns.ClientURL())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	// The call's worker: it says it took the call, and answers once told
	// (answer).
	good := connect()
	replies := make(chan string, 1)
	if _, err := good.QueueSubscribe("svc.slow", "svc", func(m *nats.Msg) {
		_ = good.PublishMsg(&nats.Msg{Subject: m.Reply, Header: nats.Header{"Edge-Worker": []string{"good"}}})
		replies <- m.Reply
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := good.Subscribe("_EDGE.alive.svc.good", func(*nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	if err := good.Flush(); err != nil {
		t.Fatal(err)
	}
	u, l, c := startNATSCall(t, ns.Addr().String())
	var reply string
	select {
	case reply = <-replies:
	case <-time.After(5 * time.Second):
		t.Fatal("the worker got no call")
	}
	poll.Until(t, 5*time.Second, "the worker's accepted applied", func() (bool, string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		e := l.calls.get(l.nextID.Load())
		return e != nil && e.worker == "good", "no worker"
	})
	id := reply[strings.LastIndexByte(reply, '.')+1:]
	inbox := reply[:strings.LastIndexByte(reply, '.')]
	evil := connect()
	spoofs := []*nats.Msg{
		{Subject: reply, Header: nats.Header{"Status": []string{"503"}}},
		{Subject: inbox + ".w.good", Header: nats.Header{"Status": []string{"503"}}},
		{Subject: reply, Header: nats.Header{"Edge-Worker": []string{"evil"}}},
		{Subject: reply, Header: nats.Header{"Edge-Worker": []string{"evil"}}, Data: []byte(`{"jsonrpc":"2.0","id":` + id + `,"result":"evil"}`)},
	}
	for i, m := range spoofs {
		before := u.Dropped()
		if err := evil.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
		poll.Until(t, 5*time.Second, "the spoofed message dropped", func() (bool, string) {
			select {
			case err := <-c.err:
				t.Fatalf("spoof %d (%s %v) ended the call: %v", i, m.Subject, m.Header, err)
			default:
			}
			return u.Dropped() > before, "not dropped"
		})
	}
	if err := good.Publish(reply, []byte(`{"jsonrpc":"2.0","id":`+id+`,"result":"good"}`)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-c.err:
		if err != nil {
			t.Fatalf("the call ended %v, want the worker's answer", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the worker's answer did not end the call")
	}
}
