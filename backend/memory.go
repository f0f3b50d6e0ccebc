package backend

import (
	"context"
	"strconv"
	"sync"
	"time"

	json "github.com/goccy/go-json"

	"github.com/openengine/edge/codec"
)

// ProtocolVersion is the protocol the memory backend speaks.
const ProtocolVersion = "openengine.cluster/v1"

// Byte-exact results of the empty cluster (goldens initialize.ndjson, get-empty.ndjson).
var (
	emptyStatus   = `{"phase":"empty","observedGeneration":null,"currentRunId":null,"atCursor":null}`
	initializeRes = `{"protocolVersion":"` + ProtocolVersion + `","capabilities":{"graphProfiles":[],"logs":false,"agentAttach":false},"status":` + emptyStatus + `}`
	getRes        = `{"spec":null,"status":` + emptyStatus + `,"atCursor":null}`
)

// Memory is the embedded default backend: an empty OECP v1 cluster plus the
// gateway's test and benchmark methods (CONTRACT.md section 8). Safe for
// concurrent use.
type Memory struct {
	mu     sync.Mutex
	gates  map[string][]chan struct{} // guarded by mu: waiters by gate name
	topics map[string]*Fanout         // guarded by mu: edge/topic subscribers by name
}

// NewMemory returns an empty memory backend.
func NewMemory() *Memory {
	return &Memory{gates: make(map[string][]chan struct{}), topics: make(map[string]*Fanout)}
}

// NonBlocking reports whether Call(method) never blocks, for
// rpc.Config.NonBlocking: echo and the answers of the empty cluster are
// computed from params alone.
func (m *Memory) NonBlocking(method string) bool {
	switch method {
	case "edge/echo", "initialize", "get":
		return true
	}
	return false
}

// Call implements Handler.
func (m *Memory) Call(ctx context.Context, method string, params, dst []byte) ([]byte, error) {
	switch method {
	case "edge/echo":
		return append(dst, params...), nil
	case "initialize":
		return m.initialize(params, dst)
	case "get":
		return append(dst, getRes...), nil
	case "edge/sleep":
		return m.sleep(ctx, params, dst)
	case "edge/gate":
		return m.gate(ctx, params, dst)
	case "edge/open":
		return m.open(params, dst)
	case "edge/publish":
		return m.publish(params, dst)
	case "plan", "apply", "update", "stop", "retry", "resubmit", "delete",
		"run/submit", "run/list", "run/status", "run/force":
		return dst, InvalidPhase(method)
	}
	return dst, ErrUnknownMethod
}

func (m *Memory) initialize(params, dst []byte) ([]byte, error) {
	var p struct {
		ProtocolVersion *string `json:"protocolVersion"`
	}
	if err := json.Unmarshal(params, &p); err != nil || p.ProtocolVersion == nil {
		return dst, SchemaViolation(nil)
	}
	if *p.ProtocolVersion != ProtocolVersion {
		details, _ := json.Marshal(struct {
			Requested string `json:"requestedProtocolVersion"`
			Supported string `json:"supportedProtocolVersion"`
		}{*p.ProtocolVersion, ProtocolVersion})
		return dst, &Error{Code: CodeApplication, Message: "Unsupported protocol version",
			DataCode: "UNSUPPORTED_PROTOCOL_VERSION", Details: details}
	}
	return append(dst, initializeRes...), nil
}

// maxSleepMs is the upper bound of edge/sleep's ms (CONTRACT.md section 8).
const maxSleepMs = 600000

func (m *Memory) sleep(ctx context.Context, params, dst []byte) ([]byte, error) {
	var p struct {
		Ms *int64 `json:"ms"`
	}
	if err := json.Unmarshal(params, &p); err != nil || p.Ms == nil || *p.Ms < 0 || *p.Ms > maxSleepMs {
		return dst, SchemaViolation(nil)
	}
	if *p.Ms > 0 {
		t := time.NewTimer(time.Duration(*p.Ms) * time.Millisecond)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return dst, ctx.Err()
		}
	}
	dst = append(dst, `{"sleptMs":`...)
	dst = strconv.AppendInt(dst, *p.Ms, 10)
	return append(dst, '}'), nil
}

type gateParams struct {
	Name *string `json:"name"`
}

func decodeGate(params []byte) (string, error) {
	var p gateParams
	if err := json.Unmarshal(params, &p); err != nil || p.Name == nil {
		return "", SchemaViolation(nil)
	}
	return *p.Name, nil
}

func (m *Memory) gate(ctx context.Context, params, dst []byte) ([]byte, error) {
	name, err := decodeGate(params)
	if err != nil {
		return dst, err
	}
	ch := make(chan struct{})
	m.mu.Lock()
	m.gates[name] = append(m.gates[name], ch)
	m.mu.Unlock()
	select {
	case <-ch:
	case <-ctx.Done():
		m.leave(name, ch)
		return dst, ctx.Err()
	}
	dst = append(dst, `{"name":`...)
	dst = codec.AppendQuote(dst, name)
	return append(dst, '}'), nil
}

// leave removes a cancelled waiter so that gates never hold state for work
// that has ended.
func (m *Memory) leave(name string, ch chan struct{}) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ws := m.gates[name]
	for i, w := range ws {
		if w == ch {
			ws = append(ws[:i], ws[i+1:]...)
			break
		}
	}
	if len(ws) == 0 {
		delete(m.gates, name)
	} else {
		m.gates[name] = ws
	}
}

func (m *Memory) open(params, dst []byte) ([]byte, error) {
	name, err := decodeGate(params)
	if err != nil {
		return dst, err
	}
	m.mu.Lock()
	ws := m.gates[name]
	delete(m.gates, name)
	m.mu.Unlock()
	for _, ch := range ws {
		close(ch)
	}
	dst = append(dst, `{"released":`...)
	dst = strconv.AppendInt(dst, int64(len(ws)), 10)
	return append(dst, '}'), nil
}

// Waiting reports how many requests wait on gate name. Safe for concurrent use.
func (m *Memory) Waiting(name string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.gates[name])
}
