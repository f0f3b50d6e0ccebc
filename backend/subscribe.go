package backend

import (
	"bytes"
	"context"
	"strconv"
	"time"

	json "github.com/goccy/go-json"

	"github.com/openengine/edge/codec"
)

// Subscribe implements Subscriber: edge/ticks and watch (CONTRACT.md section 8).
func (m *Memory) Subscribe(ctx context.Context, method string, params []byte, s Stream) error {
	switch method {
	case "edge/ticks":
		return m.ticks(ctx, params, s)
	case "edge/topic":
		return m.subscribeTopic(ctx, params, s)
	case "watch":
		// The empty cluster has nothing to report: the subscription parks
		// until it is cancelled.
		s.Establish(subscriptionResult(s.ID(), `,"runId":null,"atCursor":null`))
		<-ctx.Done()
		return nil
	case "logs", "agent/attach", "run/watch", "run/logs", "run/attach":
		return InvalidPhase(method)
	}
	return ErrUnknownMethod
}

func subscriptionResult(id, rest string) []byte {
	b := make([]byte, 0, 32+len(id)+len(rest))
	b = append(b, `{"subscriptionId":`...)
	b = codec.AppendQuote(b, id)
	b = append(b, rest...)
	return append(b, '}')
}

// Limits of edge/ticks params (CONTRACT.md section 8).
const (
	maxTickCount    = 10000000
	maxTickInterval = 60000
	maxTickSize     = 65536
)

type ticksParams struct {
	Count      *int64 `json:"count"`
	IntervalMs *int64 `json:"intervalMs"`
	Size       *int64 `json:"size"`
}

func (p *ticksParams) valid() bool {
	return p.Count != nil && *p.Count >= 1 && *p.Count <= maxTickCount &&
		p.IntervalMs != nil && *p.IntervalMs >= 0 && *p.IntervalMs <= maxTickInterval &&
		(p.Size == nil || (*p.Size >= 0 && *p.Size <= maxTickSize))
}

// ticks emits count events {"cursor":"<seq>","seq":n[,"data":"x..."]}. With
// intervalMs 0 it is paced by the consumer (as fast as the loop takes them);
// otherwise it emits on a timer and a consumer that falls behind overflows its
// buffer and is closed SLOW_CONSUMER.
func (m *Memory) ticks(ctx context.Context, params []byte, s Stream) error {
	var p ticksParams
	if err := json.Unmarshal(params, &p); err != nil || !p.valid() {
		return SchemaViolation(nil)
	}
	s.Establish(subscriptionResult(s.ID(), ""))
	var data []byte
	if p.Size != nil && *p.Size > 0 {
		data = append(append([]byte(`,"data":"`), bytes.Repeat([]byte{'x'}, int(*p.Size))...), '"')
	}
	var tick *time.Ticker
	if *p.IntervalMs > 0 {
		tick = time.NewTicker(time.Duration(*p.IntervalMs) * time.Millisecond)
		defer tick.Stop()
	}
	cursor := make([]byte, 0, 24)
	body := make([]byte, 0, 64+len(data))
	for seq := int64(1); seq <= *p.Count; seq++ {
		cursor = append(strconv.AppendInt(append(cursor[:0], '"'), seq, 10), '"')
		body = append(append(body[:0], `"cursor":`...), cursor...)
		body = strconv.AppendInt(append(body, `,"seq":`...), seq, 10)
		body = append(body, data...)
		if tick == nil {
			if !s.EmitWait(ctx, cursor, body) {
				return ctx.Err()
			}
			continue
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return ctx.Err()
		}
		if !s.Emit(cursor, body) {
			return nil
		}
	}
	return nil
}
