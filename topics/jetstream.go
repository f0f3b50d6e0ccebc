package topics

import (
	"context"
	"errors"
	"log/slog"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/openengine/edge/backend"
)

// This file is the JetStream side of the topics (--jetstream). Every topic
// is a subject of one stream, <prefix>_topics on <prefix>.topic.>, created
// if missing (file storage; events older than MaxAge, and the oldest beyond
// MaxBytes, are removed). The cursor of an event is its stream sequence.
//
// Live subscribers of a topic share one ordered consumer per topic per edge,
// from the messages new when it was created; a subscription with fromCursor
// c has an ordered consumer of its own from sequence c+1, filtered on the
// topic's subject, which replays what the stream kept and then continues
// live: one consumer, so there is no switch at which an event could be
// lost or repeated. Ordered consumers deliver in stream order, without
// gaps (nats.go recreates one from its last sequence when it notices a
// gap). A replay is paced by its client (Stream.EmitWait): the stream keeps
// the events, so a slow reader lags instead of being closed SLOW_CONSUMER;
// it is read by one goroutine per replaying subscription, which waits for
// the client (blocking in a nats.go Consume handler would stall the
// consumer's heartbeats and make it reset while the handler still runs).

// ensureStream looks the stream up and creates it when it is missing. An
// existing stream is used as it is (its limits are the operator's).
func (t *Topics) ensureStream() error {
	ctx, cancel := context.WithTimeout(context.Background(), t.cfg.Timeout)
	defer cancel()
	_, err := t.js.Stream(ctx, t.stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		_, err = t.js.CreateStream(ctx, jetstream.StreamConfig{
			Name:      t.stream,
			Subjects:  []string{t.cfg.Prefix + ".topic.>"},
			Storage:   jetstream.FileStorage,
			Retention: jetstream.LimitsPolicy,
			Discard:   jetstream.DiscardOld,
			MaxAge:    t.cfg.MaxAge,
			MaxBytes:  t.cfg.MaxBytes,
		})
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			err = nil // another edge created it meanwhile
		}
	}
	return err
}

// consumeLive starts tp's live ordered consumer: the messages stored from
// now on, fanned out with their stream sequence.
func (t *Topics) consumeLive(tp *topic) error {
	ctx, cancel := context.WithTimeout(context.Background(), t.cfg.Timeout)
	defer cancel()
	// From the sequence after the stream's last, rather than
	// DeliverNewPolicy: an ordered consumer that resets before its first
	// message starts again with its first policy, and "new" would then
	// skip what was stored meanwhile.
	st, err := t.js.Stream(ctx, t.stream)
	if err != nil {
		return err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return err
	}
	cons, err := t.js.OrderedConsumer(ctx, t.stream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{tp.subject},
		DeliverPolicy:  jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:    info.State.LastSeq + 1,
	})
	if err != nil {
		return err
	}
	tp.cons, err = cons.Consume(func(m jetstream.Msg) {
		if seq, data, ok := t.event(tp, m); ok {
			tp.fan.publishSeq(seq, data)
		}
	}, jetstream.ConsumeErrHandler(t.consumeErr))
	return err
}

// startReplay starts s's own ordered consumer from s.from+1 and establishes
// s (before the first event can be emitted), and reports whether it did.
// A subscription ended meanwhile is skipped; a failure ends it
// UPSTREAM_UNAVAILABLE.
func (t *Topics) startReplay(log *slog.Logger, s *sub) bool {
	t.mu.Lock()
	live := s.state == subOpening
	t.mu.Unlock()
	if !live {
		return false
	}
	ctx, cancel := context.WithTimeout(s.ctx, t.cfg.Timeout)
	defer cancel()
	cons, err := t.js.OrderedConsumer(ctx, t.stream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{s.t.subject},
		DeliverPolicy:  jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:    s.from + 1,
	})
	if err == nil {
		t.mu.Lock()
		if live = s.state == subOpening; live {
			stop(s.expiry)
			s.to(subReplaying)
			establishLocked(s)
		}
		t.mu.Unlock()
		if !live {
			return false
		}
		var it jetstream.MessagesContext
		if it, err = cons.Messages(); err == nil {
			s.iter = it
			go t.replay(s, it)
			return true
		}
		// Established, but nothing will come: it ends as if NATS was lost.
		log.Warn("nats topics: replay consumer failed", "topic", s.t.name, "err", err)
		t.end(s, backend.ErrUpstreamLost)
		return false
	}
	log.Warn("nats topics: replay consumer failed", "topic", s.t.name, "err", err)
	t.end(s, backend.ErrUpstreamUnavailable)
	return false
}

// replay delivers s's events from its ordered consumer's iterator, paced
// by the client (Stream.EmitWait): the events wait in the stream, not in
// edge. It returns once the iterator is stopped (the subscription ended) or
// fails (the subscription ends UPSTREAM_LOST).
func (t *Topics) replay(s *sub, it jetstream.MessagesContext) {
	var buf []byte
	for {
		m, err := it.Next()
		if err != nil {
			if !errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				t.cfg.Logger.Warn("nats topics: replay consumer failed", "topic", s.t.name, "err", err)
				t.end(s, backend.ErrUpstreamLost)
			}
			return
		}
		seq, data, ok := t.event(s.t, m)
		if !ok {
			continue
		}
		var cursor, body []byte
		buf, cursor, body = backend.TopicEvent(buf[:0], seq, data)
		if !s.st.EmitWait(s.ctx, cursor, body) {
			return // ended: Cancel stops the iterator
		}
	}
}

// end ends s with err unless it has ended already.
func (t *Topics) end(s *sub, err error) {
	var one [1]subEnd
	t.mu.Lock()
	ends := one[:0]
	if s.state != subEnded {
		ends = t.endLocked(ends, s, err)
	}
	t.mu.Unlock()
	if len(ends) > 0 {
		t.finish(ends...)
	}
}

// consumeErr logs what an ordered consumer reports (it recovers by itself
// from missed heartbeats and gaps; a lost connection ends everything).
func (t *Topics) consumeErr(_ jetstream.ConsumeContext, err error) {
	t.cfg.Logger.Debug("nats topics: consumer", "err", err)
}

// event is a stored message of tp's subject's stream sequence and data,
// false for what is not a JSON value in UTF-8 (see valid).
func (t *Topics) event(tp *topic, m jetstream.Msg) (int64, []byte, bool) {
	md, err := m.Metadata()
	if err != nil || !t.valid(tp, m.Data()) {
		return 0, nil, false
	}
	return int64(md.Sequence.Stream), m.Data(), true
}
