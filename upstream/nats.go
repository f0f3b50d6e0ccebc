package upstream

import (
	"crypto/rand"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/openengine/edge/backend"
	"github.com/openengine/edge/codec"
	"github.com/openengine/edge/internal/wire"
)

// This file is the nats:// transport (CONTRACT.md section 13; the subjects
// and headers are package wire's). A NATS replica is one nats.go connection,
// which reconnects by itself, and one link: the same pending table, timeout
// sweep and failure semantics as the other transports, and handle.go's
// reading of answers and notifications.
//
// Nothing runs per call. Forward, on a loop, queues the request for the
// link's writer goroutine, which publishes it: nats.go's publish writes to the
// socket under the connection's lock once its buffer fills, which a loop must
// never wait for. Answers arrive on the link's one wildcard inbox
// subscription (_INBOX.<nuid>.>) and are applied on nats.go's delivery
// goroutine for it, correlated by the id the reply subject ends with.

// dropSpoofed is why a NATS message was dropped that names a call or a
// worker it cannot be about: another worker's "accepted" or answer for a
// call a worker took, a no-responders status after a worker took the call,
// a probe reply without the link's secret.
const dropSpoofed = "a NATS message naming a call or a worker it cannot be about"

// natsLink is the NATS side of a nats:// link.
type natsLink struct {
	prefix string // immutable: PREFIX, the workers' queue group
	inbox  string // immutable: _INBOX.<nuid>, root of the link's reply subjects
	// probe is a secret of the link's in its probes' reply subjects
	// (probeLocked), so that no other client of the NATS server can fake
	// the no-responders status that says a worker is gone. Immutable.
	probe string
	// subjects holds PREFIX.<method> by method, so that a call builds no
	// subject; guarded by the link's mu, at most maxSubjects entries.
	subjects map[string]string
}

// maxSubjects bounds natsLink.subjects: the subjects of further methods are
// built per call.
const maxSubjects = 1024

// natsPub is one message for the writer to publish: subject, reply and
// data, or msg when it has headers.
type natsPub struct {
	subject, reply string
	data           []byte
	msg            *nats.Msg
	id             uint64 // the call it starts, 0 for a cancel or a notification
}

func (n *natsLink) reply(id uint64) string { return n.inboxSubject("", id) }
func (n *natsLink) stream(id uint64) string {
	return n.inboxSubject(wire.StreamToken, id)
}

// inboxSubject returns _INBOX.<nuid>.<token><id>, built in one allocation.
func (n *natsLink) inboxSubject(token string, id uint64) string {
	var buf [96]byte
	b := append(append(append(buf[:0], n.inbox...), '.'), token...)
	return string(strconv.AppendUint(b, id, 10))
}

// subjectLocked returns PREFIX.<method>. Called with l.mu held.
func (n *natsLink) subjectLocked(method string) string {
	if s, ok := n.subjects[method]; ok {
		return s
	}
	s := n.prefix + "." + method
	if n.subjects == nil {
		n.subjects = make(map[string]string)
	}
	if len(n.subjects) < maxSubjects {
		n.subjects[method] = s
	}
	return s
}

// requestLocked queues call id: PREFIX.<method>, reply _INBOX.<nuid>.<id>,
// and for a subscription the Edge-Stream header. Called with l.mu held.
func (n *natsLink) requestLocked(l *link, id uint64, method string, params []byte, stream bool) {
	p := natsPub{subject: n.subjectLocked(method), reply: n.reply(id), data: codec.AppendRequest(make([]byte, 0, 64+len(method)+len(params)), id, method, params), id: id}
	if stream {
		p.msg = &nats.Msg{Subject: p.subject, Reply: p.reply, Data: p.data,
			Header: nats.Header{wire.Stream: []string{n.stream(id)}}}
	}
	l.queueLocked(p)
}

// cancelLocked queues {"id":<id>} for the worker that took call id. Called
// with l.mu held.
func (n *natsLink) cancelLocked(l *link, id uint64, worker string) {
	data := codec.AppendUint(append(make([]byte, 0, 32), `{"id":`...), id)
	m := &nats.Msg{Subject: wire.CancelSubject(n.prefix, worker), Data: append(data, '}'),
		Header: nats.Header{wire.Reply: []string{n.reply(id)}}}
	l.queueLocked(natsPub{subject: m.Subject, data: m.Data, msg: m})
}

// subCancelLocked queues {"subscriptionId":<upSub>} for worker. Called with
// l.mu held.
func (n *natsLink) subCancelLocked(l *link, worker, upSub string) {
	data := codec.AppendQuote(append(make([]byte, 0, 32+len(upSub)), `{"subscriptionId":`...), upSub)
	l.queueLocked(natsPub{subject: wire.CancelSubject(n.prefix, worker), data: append(data, '}')})
}

// probeLocked queues an empty probe of worker on its alive subject, with a
// reply subject the NATS server answers no-responders on once the worker's
// connection is gone (package wire): _INBOX.<nuid>.w.<secret>.<worker>, the
// secret the link's own (natsLink.probe): the inbox and the worker ids are
// known to every worker, and a no-responders on a guessable subject would
// let any of them fail every call another worker holds. Called with l.mu
// held.
func (n *natsLink) probeLocked(l *link, worker string) {
	l.queueLocked(natsPub{subject: wire.AliveSubject(n.prefix, worker), reply: n.inbox + "." + wire.ProbeToken + n.probe + "." + worker})
}

// newProbeSecret returns a natsLink.probe: 128 random bits, one subject
// token.
func newProbeSecret() string { return rand.Text() }

// notifyLocked queues a notification on PREFIX.<method>, with no reply
// subject: no answer comes back. Called with l.mu held.
func (n *natsLink) notifyLocked(l *link, method string, params []byte) {
	l.queueLocked(natsPub{subject: n.subjectLocked(method), data: codec.AppendNotification(nil, method, params)})
}

// queueLocked adds p for the writer. Called with mu held.
func (l *link) queueLocked(p natsPub) {
	l.pubs = append(l.pubs, p)
	l.pubSize += len(p.subject) + len(p.reply) + len(p.data)
}

// takePubs hands the writer the queued messages and gives it spare for the
// next.
func (l *link) takePubs(spare []natsPub) []natsPub {
	l.mu.Lock()
	pubs := l.pubs
	l.pubs, l.pubSize = spare[:0], 0
	l.mu.Unlock()
	return pubs
}

// publish sends p on nc.
func (p *natsPub) publish(nc *nats.Conn) error {
	switch {
	case p.msg != nil:
		return nc.PublishMsg(p.msg)
	case p.reply == "":
		return nc.Publish(p.subject, p.data)
	}
	return nc.PublishRequest(p.subject, p.reply, p.data)
}

// refused answers call id UPSTREAM_UNAVAILABLE (counted unavailable): no
// worker took it (the NATS server's no-responders status), or it could not
// be published.
func (l *link) refused(id uint64) {
	var f finish
	l.mu.Lock()
	if e := l.calls.get(id); e != nil && e.state != callLive {
		f = l.moveLocked(e, callEnded, byUpstream, nil, backend.ErrUpstreamUnavailable)
	}
	l.mu.Unlock()
	f.do()
}

// noResponders applies the NATS server's no-responders status on call id's
// reply subject: nobody took the call (refused). Once a worker has said it
// took the call, that status cannot come from the server: it is another
// client's, spoofed, and is dropped and counted, so that nobody but the
// call's worker ends it.
func (l *link) noResponders(id uint64) {
	l.mu.Lock()
	e := l.calls.get(id)
	spoofed := e != nil && e.worker != ""
	l.mu.Unlock()
	if spoofed {
		l.drop(dropSpoofed)
		return
	}
	l.refused(id)
}

// accepted records that worker took call id and reports whether the
// message may go on to be applied: false (dropped and counted) when another
// worker already said it took the call, which a second "accepted" or an
// answer naming another worker cannot undo. A cancel that came before the
// link knew whom to tell is sent now (the call was dropped, or timed out).
func (l *link) accepted(id uint64, worker string) bool {
	if !validToken(worker) || strings.IndexByte(worker, '.') >= 0 {
		l.drop(dropBadJSON)
		return false
	}
	l.mu.Lock()
	e := l.calls.get(id)
	switch {
	case e == nil:
		l.mu.Unlock()
		return true // an answer to nothing: dropped as such, if it is one
	case e.worker == worker:
		l.mu.Unlock()
		return true
	case e.worker != "":
		l.mu.Unlock()
		l.drop(dropSpoofed)
		return false
	}
	l.calls.setWorker(e, worker)
	if e.state == callDropped || e.state == callExpired {
		l.cancelLocked(e)
	}
	l.mu.Unlock()
	l.signal()
	return true
}

// workerGone settles everything worker held, as a broken connection settles
// everything on it: calls in flight get UPSTREAM_UNAVAILABLE (counted
// unavailable), live subscriptions end UPSTREAM_LOST. It walks the table:
// a worker's death is rare.
func (l *link) workerGone(worker string) {
	var fs []finish
	n := 0
	l.mu.Lock()
	l.calls.each(func(e *entry) {
		if e.worker != worker {
			return
		}
		n++
		var err error = backend.ErrUpstreamUnavailable
		if e.state == callLive {
			err = backend.ErrUpstreamLost
		}
		if f := l.moveLocked(e, callEnded, byUpstream, nil, err); f.c != nil {
			fs = append(fs, f)
		}
	})
	l.mu.Unlock()
	if n == 0 {
		return
	}
	l.up.log.Warn("upstream worker gone", "upstream", l.up.name, "conn", l.desc, "worker", worker, "calls", n)
	for _, f := range fs {
		f.do()
	}
}

// natsMessage applies one message on the link's inbox: a worker's
// "accepted", a JSON-RPC response, the NATS server's no-responders status,
// or on a stream subject a subscription's response, events and end. Runs on
// nats.go's delivery goroutine of the inbox subscription; like handle, it
// never blocks.
func (l *link) natsMessage(m *nats.Msg) {
	rest, ok := strings.CutPrefix(m.Subject, l.nats.inbox+".")
	if !ok {
		l.drop(dropUnknownID)
		return
	}
	if rest == wire.EdgeAliveToken {
		return // a worker's probe: being subscribed is the answer
	}
	if probe, ok := strings.CutPrefix(rest, wire.ProbeToken); ok {
		worker, ok := strings.CutPrefix(probe, l.nats.probe+".")
		switch {
		case !ok:
			l.drop(dropSpoofed) // not a reply to a probe of the link's
		case m.Header != nil && m.Header.Get(wire.Status) == wire.NoResponders:
			l.workerGone(worker)
		}
		return
	}
	rest, stream := strings.CutPrefix(rest, wire.StreamToken)
	id, err := strconv.ParseUint(rest, 10, 64)
	if err != nil || id == 0 {
		l.drop(dropUnknownID)
		return
	}
	if !stream && m.Header != nil {
		if m.Header.Get(wire.Status) == wire.NoResponders && len(m.Data) == 0 {
			l.noResponders(id)
			return
		}
		if w := m.Header.Get(wire.Worker); w != "" {
			if !l.accepted(id, w) || len(m.Data) == 0 {
				return
			}
		}
	}
	if len(m.Data) > l.up.cfg.MaxMessageBytes {
		l.drop(dropTooLong)
		return
	}
	env, ok := parseEnvelope(m.Data)
	switch {
	case !ok:
		l.drop(dropBadJSON)
	case env.Method == nil && env.ID != nil && (env.Result != nil) != (env.Error != nil):
		// A response: the reply subject and the body must name the same
		// call, so that nothing reaches another one.
		if n, ok := codec.ParseUint(env.ID); !ok || n != id {
			l.drop(dropUnknownID)
			return
		}
		l.answer(id, env.Result, env.Error)
	case env.Method != nil && env.ID != nil:
		l.drop(dropRequest)
	case stream && codec.KeyIs(env.Method, "event"):
		if _, cursor, body, ok := l.parseEvent(env.Params); ok {
			l.mu.Lock()
			l.emitLocked(l.calls.get(id), cursor, body)
		} else {
			l.drop(dropBadJSON)
		}
	case stream && codec.KeyIs(env.Method, "subscription/closed"):
		if _, reason, ok := l.parseClosed(env.Params); ok {
			l.mu.Lock()
			l.endLocked(l.calls.get(id), reason)
		} else {
			l.drop(dropBadJSON)
		}
	case env.Method != nil:
		l.drop(dropUnknownNote)
	default:
		l.drop(dropBadJSON)
	}
}

// validToken reports whether s can follow "PREFIX." in a subject that is
// published to: dot-separated tokens, none empty or a wildcard, no
// whitespace, and not the cancel subjects' token first.
func validToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; ; i++ {
		tok, rest, more := strings.Cut(s, ".")
		if tok == "" || tok == "*" || tok == ">" || (i == 0 && tok == wire.CancelToken) {
			return false
		}
		for j := 0; j < len(tok); j++ {
			switch tok[j] {
			case ' ', '\t', '\r', '\n':
				return false
			}
		}
		if !more {
			return true
		}
		s = rest
	}
}

// inboxOverflowed handles nats.go's asynchronous error err on sub and
// reports whether it failed the link: when nats.go dropped messages of the
// inbox (its reader fell behind the subscription's pending limits), any
// answer or event may be gone, so everything on the link is failed as on a
// disconnect, rather than left to a timeout or to a silent gap in a stream.
// The link may open again at once: ids are not reused, so a late answer
// reaches nothing.
func (l *link) inboxOverflowed(sub *nats.Subscription, err error) bool {
	if !errors.Is(err, nats.ErrSlowConsumer) || sub == nil || sub.Subject != l.nats.inbox+".>" {
		return false
	}
	l.fail()
	return true
}

// natsSupervisor runs one nats:// replica: its connection (nats.go
// reconnects it with the upstream's back-off), its inbox subscription, and
// the link's writer, which also sweeps timed-out calls. The link is up while
// the connection is: a disconnect fails every call in flight
// UPSTREAM_UNAVAILABLE and every subscription UPSTREAM_LOST (link.fail), as a
// broken connection of any transport does.
type natsSupervisor struct {
	u *Upstream
	l *link
	r Replica
}

func (s *natsSupervisor) run() {
	defer s.u.wg.Done()
	log := s.u.log.With("upstream", s.u.name, "conn", s.l.desc)
	// ready carries "connected" from nats.go's callbacks to the loop
	// below, which marks the link up only once the inbox subscription is
	// in place.
	ready := make(chan struct{}, 1)
	// downLogged makes "unavailable" logged once per outage, from the
	// callbacks (CONTRACT.md section 10).
	var downLogged atomic.Bool
	up := func(*nats.Conn) {
		select {
		case ready <- struct{}{}:
		default:
		}
	}
	nc, err := nats.Connect(s.r.Addr,
		nats.Name("edge upstream "+s.u.name),
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.CustomReconnectDelay(func(attempts int) time.Duration { return s.u.backoff(attempts - 1) }),
		nats.ReconnectBufSize(-1), // nothing queues while down (CONTRACT.md section 10)
		nats.Timeout(dialTimeout),
		// A silent server is noticed within 3 s (its calls failed, the
		// connection redialled), as the topics' is.
		nats.PingInterval(wire.PingInterval),
		nats.MaxPingsOutstanding(wire.MaxPingsOut),
		nats.ConnectHandler(up),
		nats.ReconnectHandler(up),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if s.l.isUp() && downLogged.CompareAndSwap(false, true) {
				log.Warn("upstream connection lost", "err", err)
			}
			s.l.fail()
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			if s.l.inboxOverflowed(sub, err) {
				log.Warn("upstream inbox overflowed: messages dropped, calls on it failed", "err", err)
				up(nil) // open again, with fresh tables
			}
		}),
		nats.ReconnectErrHandler(func(_ *nats.Conn, err error) {
			if downLogged.CompareAndSwap(false, true) {
				log.Warn("upstream unavailable", "err", err)
			}
		}),
	)
	if err != nil {
		log.Error("upstream unusable", "err", err)
		return
	}
	defer nc.Close()
	if _, err := nc.Subscribe(s.l.nats.inbox+".>", s.l.natsMessage); err != nil {
		log.Error("upstream unusable", "err", err)
		return
	}
	up(nc)
	tick := time.NewTicker(sweepEvery(s.u.cfg.Timeout))
	defer tick.Stop()
	var spare []natsPub
	for {
		select {
		case <-s.u.quit:
			// The cancels already queued (the gateway's shutdown cancels
			// what it still held) leave before the connection closes;
			// calls not yet sent do not (they are failed).
			pubs := s.l.takePubs(nil)
			s.l.fail() // calls in flight: UPSTREAM_UNAVAILABLE
			for _, p := range pubs {
				if p.id == 0 {
					_ = p.publish(nc)
				}
			}
			return
		case now := <-tick.C:
			s.l.sweep(now.UnixNano())
		case <-ready:
			// The connection is (again) up and the inbox subscription is in
			// place: nats.go resends it before it reports a reconnect.
			if nc.IsConnected() && s.l.open() {
				downLogged.Store(false)
				log.Info("upstream connected")
			}
		case <-s.l.wake:
			pubs := s.l.takePubs(spare)
			for i, p := range pubs {
				if err := p.publish(nc); err != nil && p.id != 0 {
					s.l.refused(p.id)
				}
				pubs[i] = natsPub{}
			}
			if cap(pubs) > 4096 {
				pubs = nil
			}
			spare = pubs
		}
	}
}
