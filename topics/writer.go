package topics

import (
	"errors"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/openengine/edge/backend"
	"github.com/openengine/edge/codec"
)

// This file is the writer, the one goroutine per edge that talks to NATS
// for the event loops, and the acker, which answers JetStream publishes
// from their acknowledgements so that the writer never waits for one.

// run is the writer: it marks the topics up once NATS is (JetStream: once
// the stream exists) and does the queued operations. The stream's state is
// logged when it changes, not at each retry.
func (t *Topics) run(log *slog.Logger, ready <-chan struct{}, retry func()) {
	defer close(t.done)
	for {
		select {
		case <-t.quit:
			return
		case <-ready:
			if !t.nc.IsConnected() {
				continue
			}
			switch opened, err := t.open(); {
			case err != nil:
				if t.unusable(err) {
					log.Warn("nats topics: JetStream stream unusable", "stream", t.stream, "err", err)
				}
				retry()
			case opened:
				log.Info("nats topics: connected", "prefix", t.cfg.Prefix)
			}
		case <-t.wake:
			t.flushOps(log)
		}
	}
}

// open marks the topics up, with JetStream once the stream is there, and
// reports whether they were down; an error says the stream is not usable
// (yet).
func (t *Topics) open() (bool, error) {
	if t.cfg.JetStream {
		if err := t.ensureStream(); err != nil {
			return false, err
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.openErr = ""
	if t.up {
		return false, nil
	}
	t.up = true
	t.opens++
	t.setStatusLocked()
	return true, nil
}

// unusable records why the stream cannot be used and reports whether it
// could be before (the change to log).
func (t *Topics) unusable(err error) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	was := t.openErr
	t.openErr = err.Error()
	t.setStatusLocked()
	return was == ""
}

// take hands the writer up to maxBatch queued operations, taking back the
// memory of the last batch. Writer only.
func (t *Topics) take() ([]op, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ops, more := t.ops.pop(t.used)
	t.used = ops
	return ops, more
}

// flushOps does the queued operations, in batches: every publish and
// subscription of a batch, then one round trip to NATS (a flush) before
// the calls are completed; with JetStream the acker answers the publishes.
func (t *Topics) flushOps(log *slog.Logger) {
	for {
		ops, more := t.take()
		if len(ops) == 0 {
			return
		}
		t.apply(log, ops)
		if !more {
			return
		}
	}
}

func (t *Topics) apply(log *slog.Logger, ops []op) {
	var subscribed []op
	var pubs []op
	var batch *pubBatch
	for _, o := range ops {
		switch o.kind {
		case opSubscribe:
			if t.subscribe(log, o.t, o.want) {
				subscribed = append(subscribed, o)
			}
		case opUnsubscribe:
			t.unsubscribe(o.t)
		case opReplay:
			t.startReplay(log, o.s)
		case opStopReplay:
			if o.s.iter != nil {
				o.s.iter.Stop()
				o.s.iter = nil
			}
		case opPublish:
			if t.js != nil {
				if batch == nil {
					batch = &pubBatch{start: time.Now()}
				}
				f, err := t.js.PublishAsync(o.subject, o.data)
				if err != nil {
					log.Debug("nats topics: publish refused", "subject", o.subject, "err", err)
					t.published(o, err)
					continue
				}
				batch.pubs = append(batch.pubs, o)
				batch.acks = append(batch.acks, f)
				continue
			}
			if err := t.nc.Publish(o.subject, o.data); err != nil {
				log.Debug("nats topics: publish refused", "subject", o.subject, "err", err)
				t.published(o, err)
				continue
			}
			pubs = append(pubs, o)
		}
	}
	if batch != nil && len(batch.pubs) > 0 {
		// Never blocks: each batch holds at least one of the at most
		// maxPending publishes not answered.
		t.batches <- batch
	}
	var err error
	switch {
	case t.js != nil || len(pubs)+len(subscribed) == 0:
		// JetStream: each publish has its acknowledgement, and a
		// consumer exists once created.
	case !t.nc.IsConnected():
		// A flush would wait out its timeout; the connection's loss ends
		// the rest (fail).
		err = nats.ErrConnectionClosed
	default:
		err = t.nc.FlushTimeout(t.cfg.Timeout)
	}
	for _, o := range pubs {
		if err != nil {
			log.Debug("nats topics: publish failed", "subject", o.subject, "err", err)
		}
		t.published(o, err)
	}
	var ends []subEnd
	t.mu.Lock()
	for _, o := range subscribed {
		tp := o.t
		if tp.gone || tp.live == 0 || o.want != tp.want {
			continue
		}
		if err != nil {
			// NATS may not have the subscription: nothing is promised.
			ends = t.endWaitingLocked(ends, tp, backend.ErrUpstreamUnavailable)
			continue
		}
		stop(tp.expiry)
		tp.ready = true
		for _, s := range tp.waiting {
			t.joinLocked(s)
		}
		clear(tp.waiting)
		tp.waiting = tp.waiting[:0]
	}
	t.mu.Unlock()
	if len(ends) > 0 {
		t.finish(ends...)
	}
}

// subscribe creates tp's NATS subscription (JetStream: its live ordered
// consumer) and reports whether it did. A topic already ended, or for
// which another subscribe was queued since this one (want), is skipped; a
// failure ends its waiting subscribers UPSTREAM_UNAVAILABLE.
func (t *Topics) subscribe(log *slog.Logger, tp *topic, want uint64) bool {
	t.mu.Lock()
	skip := tp.gone || tp.live == 0 || want != tp.want
	t.mu.Unlock()
	if skip {
		return false
	}
	if t.hookSubscribe != nil {
		t.hookSubscribe()
	}
	var err error
	if t.js != nil {
		err = t.consumeLive(tp)
	} else {
		tp.nsub, err = t.nc.Subscribe(tp.subject, func(m *nats.Msg) { t.deliver(tp, m.Data) })
	}
	if err == nil {
		return true
	}
	log.Warn("nats topics: subscribe failed", "topic", tp.name, "err", err)
	t.mu.Lock()
	ends := t.endWaitingLocked(nil, tp, backend.ErrUpstreamUnavailable)
	t.mu.Unlock()
	t.finish(ends...)
	return false
}

// unsubscribe removes tp's NATS subscription or consumer.
func (t *Topics) unsubscribe(tp *topic) {
	if tp.nsub != nil {
		_ = tp.nsub.Unsubscribe()
		tp.nsub = nil
	}
	if tp.cons != nil {
		tp.cons.Stop()
		tp.cons = nil
	}
}

// deliver fans one message of a plain NATS topic out to its subscribers.
// Runs on nats.go's goroutine of the topic's subscription.
func (t *Topics) deliver(tp *topic, data []byte) {
	if t.valid(tp, data) {
		tp.fan.publish(data)
	}
}

// valid reports whether data, a message on tp's subject, is one JSON value
// in valid UTF-8 (codec.ValidJSON, as the nats:// upstreams check what
// they receive): an event goes out in a WebSocket text frame, which must
// be UTF-8 (RFC 6455 section 8.1). Anything else was published by
// something other than an edge: it is dropped and counted (Dropped), and
// the first drop is logged.
func (t *Topics) valid(tp *topic, data []byte) bool {
	if codec.ValidJSON(data) {
		return true
	}
	if t.dropped.Add(1) == 1 {
		t.cfg.Logger.Warn("nats topics: message dropped: not a JSON value in UTF-8 (further drops are counted, not logged)",
			"topic", tp.name, "bytes", len(data))
	}
	return false
}

// pubBatch is the JetStream publishes of one writer batch, waiting for
// their acknowledgements together.
type pubBatch struct {
	start time.Time // just before the first was sent: the batch's deadline is start+Timeout
	pubs  []op
	acks  []jetstream.PubAckFuture
}

// errNoAck is a publish's failure when the stream did not acknowledge it by
// its batch's deadline.
var errNoAck = errors.New("nats topics: no JetStream acknowledgement in time")

// acker answers the JetStream publishes from their acknowledgements, batch
// after batch, each batch within one deadline (Timeout after it was sent):
// a stream that stops acknowledging holds no publish longer than that, and
// never the writer, which goes on with subscriptions meanwhile.
func (t *Topics) acker(log *slog.Logger) {
	defer close(t.ackDone)
	for {
		select {
		case <-t.quit:
			return
		case b := <-t.batches:
			t.awaitAcks(log, b)
		}
	}
}

// awaitAcks answers the publishes of b once acknowledged or refused, those
// without an answer by b's deadline UPSTREAM_UNAVAILABLE.
func (t *Topics) awaitAcks(log *slog.Logger, b *pubBatch) {
	tm := time.NewTimer(time.Until(b.start.Add(t.cfg.Timeout)))
	defer tm.Stop()
	late, answered := false, false
	var why string
	var failure error
	for i, f := range b.acks {
		err := waitAck(f, tm.C, t.quit, &late)
		if err != nil {
			failure = err
			log.Debug("nats topics: publish failed", "subject", b.pubs[i].subject, "err", err)
		}
		a, w := t.ackState(err)
		answered = answered || a
		if w != "" {
			why = w
		}
		t.published(b.pubs[i], err)
	}
	t.acked(log, answered, why, failure)
}

// waitAck waits for f's acknowledgement until deadline fires or quit is
// closed (then *late is set and later calls do not wait).
func waitAck(f jetstream.PubAckFuture, deadline <-chan time.Time, quit <-chan struct{}, late *bool) error {
	if !*late {
		select {
		case <-f.Ok():
			return nil
		case err := <-f.Err():
			return err
		case <-deadline:
		case <-quit:
		}
		*late = true
	}
	select {
	case <-f.Ok():
		return nil
	case err := <-f.Err():
		return err
	default:
		return errNoAck
	}
}

// ackState classifies a publish's outcome: the stream answered it (its
// acknowledgement, or its refusal of that one message, a JetStream API
// error), or the failure says why the stream answers no publish, or
// neither (the connection's loss, which fail handles).
func (t *Topics) ackState(err error) (answered bool, why string) {
	var refused *jetstream.APIError
	switch {
	case err == nil || errors.As(err, &refused):
		return true, ""
	case errors.Is(err, errNoAck) || errors.Is(err, jetstream.ErrAsyncPublishTimeout):
		return false, "no publish acknowledged within " + t.cfg.Timeout.String()
	case errors.Is(err, jetstream.ErrNoStreamResponse):
		return false, "no stream takes the topics' subjects"
	}
	return false, ""
}

// acked records how the stream answered a batch: one answer says it
// answers; none, with a reason why, that it does not, which /readyz
// reports (NotReady) and which lets one publish at a time out until it
// answers again. A refusal of one message (too large for the stream, say)
// changes nothing: a client cannot make the edge unready. The change is
// logged, not each batch.
func (t *Topics) acked(log *slog.Logger, answered bool, why string, failure error) {
	if !answered && why == "" {
		return
	}
	t.mu.Lock()
	was := t.stall
	switch {
	case answered:
		t.stall = ""
	case t.up: // else fail ended everything; the next connection starts afresh
		t.stall = why
	}
	now := t.stall
	t.setStatusLocked()
	t.mu.Unlock()
	switch {
	case was == "" && now != "":
		log.Warn("nats topics: JetStream stream not acknowledging publishes", "stream", t.stream, "err", failure)
	case was != "" && now == "":
		log.Info("nats topics: JetStream stream acknowledging publishes again", "stream", t.stream)
	}
}
