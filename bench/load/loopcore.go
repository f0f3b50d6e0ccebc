package load

import "time"

// slot is one request in flight: its sequence number and the time its
// latency runs from (when it was sent; for the open loop its scheduled time
// if that was earlier). sent 0: free.
type slot struct {
	seq  uint64
	sent int64
}

// loopConn is one connection of an event-loop generator run (closedLoop,
// openLoop). Every field is owned by the loop's goroutine.
type loopConn struct {
	c    *Conn
	fd   int
	tag  int // index in the loop's connections, the tag of its events
	tmpl *Template
	ring []slot // requests in flight by sequence number; its length is a power of two
	next uint64 // next sequence number
	out  int    // requests in flight (sent, or waiting in wbuf)
	wbuf []byte
	held bool // the Conn refused wbuf (errBacklog): it goes once the backlog drained (closed loop)

	outWatch bool  // the poller watches the socket for writing
	closed   bool  // the server closed it, or it failed: no longer used
	err      error // why it closed
}

// slot returns the ring slot of sequence number seq.
func (o *loopConn) slot(seq uint64) *slot { return &o.ring[seq&uint64(len(o.ring)-1)] }

// loopCore is what the event-loop generators share: the poller, the window,
// and what the replies measured. Every field is owned by the loop's goroutine.
type loopCore struct {
	p   *poller
	d   Dialect
	win Window

	lat                        LatBuf
	spinIdle                   int64 // ns of the window spent polling with nothing to do (Spin)
	replies, errors, unmatched int64
	outstanding                int   // requests in flight, all connections
	dropped                    int   // connections the server closed or that failed
	firstErr                   error // the first of their errors
}

// result is what the run measured, as both loops report it; rec is the
// recorder behind lat.
func (l *loopCore) result(conns int, rec *Recorder) Result {
	l.lat.Flush()
	res := Result{Conns: conns, Seconds: l.win.Seconds(),
		Requests: l.replies, Errors: l.errors, Unmatched: l.unmatched}
	res.Rate = float64(res.Requests) / res.Seconds
	res.SpinIdle = float64(l.spinIdle) / 1e9
	res.Latency = rec.Latency()
	return res
}

// handle processes one server message on o received at now: a ping is
// answered; a reply or error is matched by id to its slot and measured when
// inside the window. It reports whether the message answered one of o's
// requests, whose slot is then free.
func (l *loopCore) handle(o *loopConn, msg []byte, now int64) bool {
	m := l.d.Classify(msg)
	switch m.Kind {
	case KindPing:
		if err := o.c.WriteText(l.d.PingReply()); err != nil && err != errBacklog {
			l.drop(o, err)
			return false
		}
		l.watchOut(o)
		return false
	case KindError:
		l.errors++
	case KindReply:
	default:
		return false
	}
	if !m.HasID || m.ID < IDBase {
		return false
	}
	seq := m.ID - IDBase
	s := o.slot(seq)
	if s.sent == 0 || s.seq != seq {
		l.unmatched++
		return false
	}
	if l.win.In(now) {
		l.replies++
		l.lat.Add(now - s.sent)
	}
	s.sent = 0
	o.out--
	l.outstanding--
	return true
}

// writable handles a write event: the Conn's backlog is flushed. It reports
// false when that failed and o was dropped.
func (l *loopCore) writable(o *loopConn) bool {
	if _, err := o.c.flushBacklog(); err != nil {
		l.drop(o, err)
		return false
	}
	return true
}

// watchOut makes the poller watch o for writing exactly while o has bytes
// waiting: a backlog in its Conn, or a batch the Conn refused.
func (l *loopCore) watchOut(o *loopConn) {
	if b := o.held || o.c.backlogged(); b != o.outWatch {
		if err := l.p.watchOut(o.fd, o.tag, b); err != nil {
			l.drop(o, err)
			return
		}
		o.outWatch = b
	}
}

// drop takes a closed or failed connection out of the run: its outstanding
// requests are no longer waited for.
func (l *loopCore) drop(o *loopConn, err error) {
	if o.closed {
		return
	}
	o.closed, o.err = true, err
	l.dropped++
	if l.firstErr == nil {
		l.firstErr = err
	}
	l.outstanding -= o.out
	o.out = 0
	l.p.remove(o.fd)
}

// detach hands every connection back to blocking use (a no-op for one that
// was never attached).
func detach(conns []*Conn) {
	for _, c := range conns {
		c.detach(time.Second)
	}
}
