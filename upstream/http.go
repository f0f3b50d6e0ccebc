package upstream

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/openengine/edge/backend"
	"github.com/openengine/edge/codec"
)

// httpReplica forwards unary calls as JSON-RPC over HTTP/1.1 POST
// (CONTRACT.md section 10). HTTP has no multiplexing and no cancel message,
// so each call is one request on its own goroutine (net/http's: its
// transport adds a read and a write loop per connection), and a cancel
// aborts it. A replica whose requests fail at the transport is skipped for
// a back-off.
//
// A call from forward to its end is one entry of the replica's table
// (pending), in a state of callState, as on a link, and changes state only
// through moveLocked: sent -> dropped (Cancel: the request is aborted),
// sent or dropped -> ended (its goroutine, once the response is read and
// closed, or the request failed). Leaving the states in flight gives the
// request slot back and counts the outcome; the call is finished once, on
// the transition out of the states that hold it.
//
// Everything a replica holds is bounded: at most Config.HTTPConns
// requests are in flight on it, calls and notifications alike, and so at
// most as many connections, with about three goroutines each: the
// request's and its connection's read and write loops (forwardHTTP and
// notifyHTTP take a slot before a goroutine starts; over the bound nothing
// starts and nothing queues); a response's head is read up to
// Config.MaxHeaderBytes and its body up to Config.MaxMessageBytes; a
// redirect is not followed.
type httpReplica struct {
	u      *Upstream
	url    string // as given: dialled, never printed
	desc   string // url for logs, its userinfo masked
	client *http.Client
	max    int64 // immutable: Config.HTTPConns

	// active is the requests in flight: taken (acquire) on the loop that
	// forwards, before the request's goroutine starts; given back by that
	// goroutine once the response is read and closed.
	active atomic.Int64

	// base is every request's context: abortAll cancels it.
	base  context.Context
	abort context.CancelFunc

	running sync.WaitGroup // the requests' goroutines

	// hookAnswered, set by tests before the first call, is called by a
	// call's goroutine once the response is read and closed, before the
	// call ends.
	hookAnswered func(id uint64)

	mu      sync.Mutex
	nextID  uint64               // guarded by mu
	pending map[uint64]*httpCall // guarded by mu: the calls forwarded and not ended
	fails   int                  // guarded by mu: transport failures in a row
	downTil time.Time            // guarded by mu: skipped until then
	wasDown bool                 // guarded by mu: the last state logged was down
	garbage burst                // guarded by mu: answers dropped
}

func newHTTPReplica(u *Upstream, r Replica) *httpReplica {
	n := u.cfg.HTTPConns
	base, abort := context.WithCancel(context.Background())
	return &httpReplica{
		u:    u,
		url:  r.URL,
		desc: r.String(),
		client: &http.Client{
			Transport: &http.Transport{
				// The slots bound the connections already; this holds
				// should a closing connection and its replacement
				// overlap.
				MaxConnsPerHost:        n,
				MaxIdleConnsPerHost:    n,
				IdleConnTimeout:        90 * time.Second,
				MaxResponseHeaderBytes: int64(u.cfg.MaxHeaderBytes),
			},
			// A JSON-RPC POST is not redirected: the 3xx is the answer
			// (do), and nothing is sent to where it points.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		max:     int64(n),
		base:    base,
		abort:   abort,
		pending: make(map[uint64]*httpCall),
	}
}

// httpCall is one call of an http replica's table. Guarded by
// httpReplica.mu.
type httpCall struct {
	state callState          // callSent, callDropped or callEnded
	c     backend.Call       // nil once finished
	abort context.CancelFunc // the request's context
	sent  int64              // unix nanoseconds: when it was forwarded (the metric's start)
}

// httpCanGo reports whether an http call may go from -> to: the subset of
// callState's table an http call takes (no subscriptions, and a call that
// times out is aborted and ends then, as HTTP has no late answer to wait
// for).
func httpCanGo(from, to callState) bool {
	return from.canGo(to) && (from == callSent || from == callDropped) && (to == callDropped || to == callEnded)
}

// moveLocked moves call id, e, to state to for cause why, with what the
// transition calls for: the request aborted (dropped, ended), the request
// slot given back and the outcome counted when it leaves the states in
// flight (sent, dropped: the slot is held until the response is read and
// closed, so that slots bound connections), removal from pending, and the
// call's one Finish (result or err; a dropped call's is
// UPSTREAM_UNAVAILABLE, not delivered), returned for the caller to apply
// once mu is released. An illegal transition panics. Called with mu held.
func (h *httpReplica) moveLocked(id uint64, e *httpCall, to callState, why cause, result []byte, err error) finish {
	from := e.state
	if !httpCanGo(from, to) {
		panic("upstream: http call " + strconv.FormatUint(id, 10) + ": illegal transition " + from.String() + " -> " + to.String())
	}
	e.abort() // dropped: the transport's cancel; ended: frees the context
	var f finish
	if from.inFlight() && !to.inFlight() {
		h.release()
		h.u.counters.ended(outcomeOf(from, why, err), e.sent, nowNanos())
	}
	if from.holdsCall() && !to.holdsCall() {
		if from == callDropped {
			result, err = nil, backend.ErrUpstreamUnavailable // not delivered: cancelled
		}
		f = finish{c: e.c, result: result, err: err}
		e.c = nil
	}
	if to == callEnded {
		delete(h.pending, id)
	}
	e.state = to
	return f
}

// end ends call id, e, for cause why with result or err, and finishes it.
// Called without mu, by the call's goroutine.
func (h *httpReplica) end(id uint64, e *httpCall, why cause, result []byte, err error) {
	h.mu.Lock()
	f := h.moveLocked(id, e, callEnded, why, result, err)
	h.mu.Unlock()
	f.do()
}

// acquire takes a request slot, false when all Config.HTTPConns are in
// flight. Safe for concurrent use; never waits.
func (h *httpReplica) acquire() bool {
	for {
		n := h.active.Load()
		if n >= h.max {
			return false
		}
		if h.active.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// release gives a request slot back.
func (h *httpReplica) release() { h.active.Add(-1) }

func (h *httpReplica) up() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return time.Now().After(h.downTil)
}

// forwardHTTP forwards unary call c to an http replica that is up and has
// a request slot free, trying each from a rotating offset. With every
// replica that is up at its bound, c is answered SERVER_BUSY at once, as
// --max-tasks answers a call over the gateway's bound; with none up,
// UPSTREAM_UNAVAILABLE. Nothing waits for a slot: a waiting call would
// park a goroutine or queue (CONTRACT.md section 10: nothing queues), and
// the client, which sees SERVER_BUSY, decides whether to retry. Runs on an
// event loop; never waits for I/O.
func (u *Upstream) forwardHTTP(c backend.Call) backend.Ticket {
	h, busy := u.slotHTTP()
	switch {
	case h != nil:
		return h.forward(c)
	case busy:
		u.busyNow(false)
		u.refuse(c, nil, outcomeBusy, backend.ErrServerBusy)
	default:
		u.refuse(c, nil, outcomeUnavailable, backend.ErrUpstreamUnavailable)
	}
	return backend.Ticket{}
}

// notifyHTTP posts a notification to an http replica that is up and has a
// request slot free. With every replica that is up at its bound it is
// dropped, counted (Stats.NotificationsDropped) and logged once per burst;
// with none up it is dropped as for any upstream that is down.
func (u *Upstream) notifyHTTP(method string, params []byte) {
	h, busy := u.slotHTTP()
	switch {
	case h != nil:
		h.notify(method, params)
	case busy:
		u.counters.notesDropped.Add(1)
		u.busyNow(true)
	}
}

// slotHTTP returns an http replica that is up with a request slot taken
// on it, or nil and whether some replica was up but at its bound.
func (u *Upstream) slotHTTP() (h *httpReplica, busy bool) {
	n := len(u.http)
	if n == 0 {
		return nil, false
	}
	off := int(u.next.Add(1) % uint32(n))
	for i := range n {
		h := u.http[(off+i)%n]
		if !h.up() {
			continue
		}
		if h.acquire() {
			return h, false
		}
		busy = true
	}
	return nil, busy
}

// httpBusy is the log of an upstream's http replicas refusing work at
// their bound: the first refusal after a quiet second is logged at once,
// the rest are counted and reported with the next log line.
type httpBusy struct {
	mu      sync.Mutex
	b       burst // guarded by mu
	notes   int   // guarded by mu: notifications dropped since the last line
	refused int   // guarded by mu: calls answered SERVER_BUSY since the last line
}

// busyNow records a refusal at the bound: a dropped notification (note) or
// a call answered SERVER_BUSY. Runs on event loops: it logs at most once a
// second.
func (u *Upstream) busyNow(note bool) {
	b := &u.busy
	b.mu.Lock()
	if note {
		b.notes++
	} else {
		b.refused++
	}
	if !b.b.add(time.Now()) {
		b.mu.Unlock()
		return
	}
	notes, refused := b.notes, b.refused
	b.notes, b.refused, b.b.suppressed = 0, 0, 0
	b.mu.Unlock()
	u.log.Warn("http upstream at its request bound: notifications dropped, calls answered SERVER_BUSY",
		"upstream", u.name, "upstreamHTTPConns", u.cfg.HTTPConns,
		"notificationsDropped", notes, "callsRefused", refused)
}

// forward sends call c on a slot acquire took.
func (h *httpReplica) forward(c backend.Call) backend.Ticket {
	ctx, abort := context.WithTimeout(h.base, h.u.cfg.Timeout)
	e := &httpCall{state: callSent, c: c, abort: abort, sent: nowNanos()}
	h.mu.Lock()
	h.nextID++
	id := h.nextID
	h.pending[id] = e
	h.mu.Unlock()
	body := codec.AppendRequest(nil, id, c.Method(), c.Params())
	h.running.Add(1)
	go h.do(ctx, id, e, body)
	return backend.NewTicket(h, id)
}

// Cancel implements backend.Canceller: the call is dropped and its
// request aborted; its goroutine ends it (UPSTREAM_UNAVAILABLE, counted
// cancelled) once the request has returned. Concurrent.
func (h *httpReplica) Cancel(id uint64) {
	var f finish
	h.mu.Lock()
	if e := h.pending[id]; e != nil && e.state == callSent {
		f = h.moveLocked(id, e, callDropped, byGateway, nil, nil)
	}
	h.mu.Unlock()
	f.do()
}

// Why an http answer was dropped, besides handle.go's reasons.
const (
	dropRedirect = "a redirect, not followed"
	dropLongHead = "response head over the size limit"
)

// do sends call id, e, and ends it with what came back.
func (h *httpReplica) do(ctx context.Context, id uint64, e *httpCall, body []byte) {
	defer h.running.Done()
	why, result, err := h.post(ctx, body, id)
	if h.hookAnswered != nil {
		h.hookAnswered(id)
	}
	h.end(id, e, why, result, err)
}

// post sends body, call id's request, and returns how the call ends: the
// upstream's answer (byAnswer), a failure (byDown), or a timeout, once the
// response is read and closed.
func (h *httpReplica) post(ctx context.Context, body []byte, id uint64) (cause, []byte, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	res, err := h.client.Do(req)
	if err != nil {
		switch {
		case ctx.Err() == context.DeadlineExceeded:
			return byTimeout, nil, backend.ErrUpstreamTimeout
		case ctx.Err() != nil: // cancelled, or Close
		case headTooLong(err):
			// The upstream answered, too much: not a transport failure.
			h.drop(dropLongHead, 0, "")
		default:
			h.failed(err)
		}
		return byDown, nil, backend.ErrUpstreamUnavailable
	}
	defer res.Body.Close()
	if res.StatusCode >= 300 && res.StatusCode < 400 {
		// Not followed, also to the same host: a POST re-sent elsewhere
		// (307, 308) or turned into a GET (301-303) is not the call the
		// client made. The --upstream URL wants fixing.
		h.drop(dropRedirect, res.StatusCode, res.Header.Get("Location"))
		return byAnswer, nil, errUpstreamProtocol
	}
	data, err := io.ReadAll(io.LimitReader(res.Body, int64(h.u.cfg.MaxMessageBytes)+1))
	if err != nil {
		if ctx.Err() == context.DeadlineExceeded {
			return byTimeout, nil, backend.ErrUpstreamTimeout
		}
		return byDown, nil, backend.ErrUpstreamUnavailable
	}
	h.ok()
	if len(data) > h.u.cfg.MaxMessageBytes {
		h.drop(dropTooLong, res.StatusCode, "")
		return byDown, nil, backend.ErrUpstreamUnavailable
	}
	msg, ok := codec.ParseMessage(data)
	idTok, result, errObj := msg.ID, msg.Result, msg.Error
	got, idOK := codec.ParseUint(idTok)
	if !ok || !idOK || got != id || (result == nil) == (errObj == nil) {
		h.drop(dropBadJSON, res.StatusCode, "")
		return byDown, nil, backend.ErrUpstreamUnavailable
	}
	if errObj != nil {
		err := answerError(errObj)
		if err == errUpstreamProtocol {
			h.drop(dropBadError, res.StatusCode, "")
		}
		return byAnswer, nil, err
	}
	return byAnswer, result, nil
}

// headTooLong reports whether err is net/http's for a response head over
// Transport.MaxResponseHeaderBytes, which has no type of its own
// (TestHTTPResponseHeadBounded fails should its text change).
func headTooLong(err error) bool {
	return strings.Contains(err.Error(), "server response headers exceeded")
}

// drop counts an answer that was not passed on and logs it once per
// burst: why, the HTTP status (0: none read) and a redirect's Location.
func (h *httpReplica) drop(why string, status int, location string) {
	h.u.dropped.Add(1)
	h.mu.Lock()
	log := h.garbage.add(time.Now())
	suppressed, total := h.garbage.suppressed, h.garbage.total
	if log {
		h.garbage.suppressed = 0
	}
	h.mu.Unlock()
	if !log {
		return
	}
	attrs := []any{"upstream", h.u.name, "conn", h.desc, "why", why}
	if status != 0 {
		attrs = append(attrs, "status", status)
	}
	if location != "" {
		attrs = append(attrs, "location", location)
	}
	attrs = append(attrs, "droppedSinceLastLog", suppressed, "droppedTotal", total)
	h.u.log.Warn("upstream message dropped", attrs...)
}

// failed records a transport failure: the replica is skipped for a back-off.
func (h *httpReplica) failed(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.downTil = time.Now().Add(h.u.backoff(h.fails))
	h.fails++
	if !h.wasDown {
		h.wasDown = true
		h.u.log.Warn("upstream unavailable", "upstream", h.u.name, "conn", h.desc, "err", err)
	}
}

func (h *httpReplica) ok() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.fails = 0
	if h.wasDown {
		h.wasDown = false
		h.u.log.Info("upstream connected", "upstream", h.u.name, "conn", h.desc)
	}
}

// notify posts a notification on a slot acquire took; its HTTP answer
// carries nothing.
func (h *httpReplica) notify(method string, params []byte) {
	body := codec.AppendNotification(nil, method, params)
	h.running.Add(1)
	go func() {
		defer h.running.Done()
		defer h.release() // last: after the response is closed
		ctx, cancel := context.WithTimeout(h.base, h.u.cfg.Timeout)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.url, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if res, err := h.client.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, int64(h.u.cfg.MaxMessageBytes)))
			res.Body.Close()
		}
	}()
}

// abortAll aborts every request in flight (Upstream.Close): each call is
// answered UPSTREAM_UNAVAILABLE.
func (h *httpReplica) abortAll() { h.abort() }
