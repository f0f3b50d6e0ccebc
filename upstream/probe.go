package upstream

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"unicode/utf8"

	"github.com/openengine/edge/codec"
	"github.com/openengine/edge/internal/redact"
)

// The probe: when a tcp:// connection counts as up.
//
// A TCP port can be anything: another edge's WebSocket listener, an HTTP
// server, a server that accepts and says nothing. And an NDJSON upstream
// may say nothing until it is asked. So a tcp:// link that has connected
// takes no calls and is not counted up (Connected, /readyz) until the
// upstream has answered a request: on connecting, edge sends probeRequest,
// a call of a method that JSON-RPC 2.0 reserves ("rpc." names are for
// rpc-internal methods and extensions and MUST NOT be used for anything
// else), so that no service implements it and any JSON-RPC server answers
// it, -32601 Method not found being the answer expected. Any response with
// the probe's id, result or error, proves the upstream speaks JSON-RPC,
// and the link opens. Before that answer, a line that is not a JSON-RPC
// message (an HTTP status line, binary) ends the connection; so does no
// answer within the upstream timeout, and the upstream closing it. Each
// leaves its reason for /readyz (Upstream.Down), the supervisor logs it
// once and reconnects with back-off.
//
// exec and ws links open as soon as they are connected: an exec child was
// started for this, and a WebSocket upgrade has been answered.

// probeID is the id of the probe, a string: edge's own calls have integer
// ids, so its answer is never taken for a call's.
const probeID = `"edge.probe"`

var probeRequest = []byte(`{"jsonrpc":"2.0","id":` + probeID + `,"method":"rpc.edge.probe"}` + "\n")

// errNotJSONRPC ends a connection whose upstream answered the probe with
// something that is not JSON-RPC.
var errNotJSONRPC = errors.New("the upstream does not speak NDJSON JSON-RPC")

// The reasons a probing connection is not up.
const (
	whyProbing   = "connected, no answer to edge's probe yet"
	whyClosed    = "closed the connection without answering edge's probe (not an NDJSON JSON-RPC server?)"
	whyLost      = "connection lost, reconnecting"
	whyNotString = "not JSON-RPC: it sent "
)

// probeState is a link's side of the probe and of its readiness reason.
type probeState struct {
	probes bool   // immutable: the link opens once the probe is answered (tcp)
	url    string // immutable: the replica's URL, credentials masked, for Down
	// why says why the link is not up, for /readyz; nil when up.
	why atomic.Pointer[string]
	// answered tells the supervisor that the probe was answered (cap 1).
	answered chan struct{}
}

func (p *probeState) setWhy(s string) { p.why.Store(&s) }

// whyNow is why the link is not up, "" when it is or nothing is known.
func (p *probeState) whyNow() string {
	if s := p.why.Load(); s != nil {
		return *s
	}
	return ""
}

// startProbe writes the probe on a connection the loop just opened. Runs on
// the link's loop, in Open.
func (l *link) startProbe() {
	l.rd.probing = true
	l.setWhy(whyProbing)
	l.wc.Write(probeRequest)
}

// probed applies line, read while the probe is unanswered: the probe's
// answer opens the link; another JSON-RPC message is handled as usual (an
// upstream may greet); anything else ends the connection (errNotJSONRPC).
// Runs on the link's loop.
func (l *link) probed(line []byte) error {
	m, ok := codec.ParseMessage(line)
	switch {
	case !ok:
		l.setWhy(whyNotString + quoteStart(line))
		return errNotJSONRPC
	case m.Method == nil && string(m.ID) == probeID && (m.Result != nil) != (m.Error != nil):
		l.rd.probing = false
		l.open()
		l.why.Store(nil)
		select {
		case l.answered <- struct{}{}:
		default:
		}
	default:
		l.handle(line)
	}
	return nil
}

// quoteStart quotes the start of what an upstream sent, at most 40 bytes,
// for a log line and /readyz.
func quoteStart(b []byte) string {
	const max = 40
	if len(b) <= max {
		return strconv.QuoteToASCII(string(b))
	}
	b = b[:max]
	for len(b) > 0 && !utf8.Valid(b) {
		b = b[:len(b)-1] // no rune cut in two
	}
	return strconv.QuoteToASCII(string(b)) + "..."
}

// Down says why the upstream's connections that are not up are not, each
// distinct reason once with its replica's URL, e.g. `tcp://127.0.0.1:8080:
// not JSON-RPC: it sent "HTTP/1.1 400 Bad Request"`; "" when it knows no
// reason. Concurrent.
func (u *Upstream) Down() string {
	var out []string
	for _, l := range u.links {
		if l.isUp() {
			continue
		}
		why := l.whyNow()
		if why == "" {
			continue
		}
		s := fmt.Sprintf("%s: %s", l.url, why)
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return strings.Join(out, "; ")
}

// dialWhy is the reason of a failed connection attempt, credentials masked.
func dialWhy(err error) string { return redact.URLs(err.Error()) }
