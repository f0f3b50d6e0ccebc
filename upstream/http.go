package upstream

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/openengine/edge/backend"
	"github.com/openengine/edge/codec"
)

// httpReplica forwards unary calls as JSON-RPC over HTTP/1.1 POST
// (CONTRACT.md section 10). HTTP has no multiplexing and no cancel message,
// so each call is one request on its own goroutine, and a cancel aborts it.
// A replica whose requests fail at the transport is skipped for a back-off.
// A response's head is read up to Config.MaxHeaderBytes and its body up
// to Config.MaxMessageBytes; a redirect is not followed.
type httpReplica struct {
	u      *Upstream
	url    string
	client *http.Client

	calls sync.WaitGroup // the calls' goroutines

	mu      sync.Mutex
	nextID  uint64                        // guarded by mu
	cancels map[uint64]context.CancelFunc // guarded by mu: calls in flight
	fails   int                           // guarded by mu: transport failures in a row
	downTil time.Time                     // guarded by mu: skipped until then
	wasDown bool                          // guarded by mu: the last state logged was down
	garbage burst                         // guarded by mu: answers dropped
}

func newHTTPReplica(u *Upstream, r Replica) *httpReplica {
	return &httpReplica{
		u:   u,
		url: r.URL,
		client: &http.Client{
			Transport: &http.Transport{
				MaxIdleConnsPerHost:    max(u.cfg.Conns, 64),
				IdleConnTimeout:        90 * time.Second,
				MaxResponseHeaderBytes: int64(u.cfg.MaxHeaderBytes),
			},
			// A JSON-RPC POST is not redirected: the 3xx is the answer
			// (do), and nothing is sent to where it points.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		cancels: make(map[uint64]context.CancelFunc),
	}
}

func (h *httpReplica) up() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return time.Now().After(h.downTil)
}

func (h *httpReplica) forward(c backend.Call) backend.Ticket {
	ctx, cancel := context.WithTimeout(context.Background(), h.u.cfg.Timeout)
	h.mu.Lock()
	h.nextID++
	id := h.nextID
	h.cancels[id] = cancel
	h.mu.Unlock()
	body := codec.AppendRequest(nil, id, c.Method(), c.Params())
	h.calls.Add(1)
	go h.do(ctx, id, body, c)
	return backend.NewTicket(h, id)
}

// Cancel implements backend.Canceller: the HTTP request is aborted.
func (h *httpReplica) Cancel(id uint64) {
	h.mu.Lock()
	cancel := h.cancels[id]
	h.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// Why an http answer was dropped, besides handle.go's reasons.
const (
	dropRedirect = "a redirect, not followed"
	dropLongHead = "response head over the size limit"
)

func (h *httpReplica) do(ctx context.Context, id uint64, body []byte, c backend.Call) {
	defer h.calls.Done()
	start := nowNanos()
	c = countedCall{Call: c, u: h.u, ctx: ctx, start: start}
	defer func() {
		h.mu.Lock()
		cancel := h.cancels[id]
		delete(h.cancels, id)
		h.mu.Unlock()
		cancel()
	}()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	res, err := h.client.Do(req)
	if err != nil {
		switch {
		case ctx.Err() == context.DeadlineExceeded:
			c.Finish(nil, backend.ErrUpstreamTimeout)
			return
		case ctx.Err() != nil: // cancelled, or Close
		case headTooLong(err):
			// The upstream answered, too much: not a transport failure.
			h.drop(dropLongHead, 0, "")
		default:
			h.failed(err)
		}
		c.Finish(nil, backend.ErrUpstreamUnavailable)
		return
	}
	defer res.Body.Close()
	if res.StatusCode >= 300 && res.StatusCode < 400 {
		// Not followed, also to the same host: a POST re-sent elsewhere
		// (307, 308) or turned into a GET (301-303) is not the call the
		// client made. The --upstream URL wants fixing.
		h.drop(dropRedirect, res.StatusCode, res.Header.Get("Location"))
		c.Finish(nil, errUpstreamProtocol)
		return
	}
	data, err := io.ReadAll(io.LimitReader(res.Body, int64(h.u.cfg.MaxMessageBytes)+1))
	if err != nil {
		if ctx.Err() == context.DeadlineExceeded {
			c.Finish(nil, backend.ErrUpstreamTimeout)
			return
		}
		c.Finish(nil, backend.ErrUpstreamUnavailable)
		return
	}
	h.ok()
	if len(data) > h.u.cfg.MaxMessageBytes {
		h.drop(dropTooLong, res.StatusCode, "")
		c.Finish(nil, backend.ErrUpstreamUnavailable)
		return
	}
	msg, ok := codec.ParseMessage(data)
	idTok, result, errObj := msg.ID, msg.Result, msg.Error
	got, idOK := codec.ParseUint(idTok)
	if !ok || !idOK || got != id || (result == nil) == (errObj == nil) {
		h.drop(dropBadJSON, res.StatusCode, "")
		c.Finish(nil, backend.ErrUpstreamUnavailable)
		return
	}
	if errObj != nil {
		err := answerError(errObj)
		if err == errUpstreamProtocol {
			h.drop(dropBadError, res.StatusCode, "")
		}
		c.Finish(nil, err)
		return
	}
	c.Finish(result, nil)
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
	attrs := []any{"upstream", h.u.name, "conn", h.url, "why", why}
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
		h.u.log.Warn("upstream unavailable", "upstream", h.u.name, "conn", h.url, "err", err)
	}
}

func (h *httpReplica) ok() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.fails = 0
	if h.wasDown {
		h.wasDown = false
		h.u.log.Info("upstream connected", "upstream", h.u.name, "conn", h.url)
	}
}

// notify posts a notification; its HTTP answer carries nothing.
func (h *httpReplica) notify(method string, params []byte) {
	body := codec.AppendNotification(nil, method, params)
	h.calls.Add(1)
	go func() {
		defer h.calls.Done()
		ctx, cancel := context.WithTimeout(context.Background(), h.u.cfg.Timeout)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.url, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if res, err := h.client.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, int64(h.u.cfg.MaxMessageBytes)))
			res.Body.Close()
		}
	}()
}

// abortAll aborts every call in flight (Upstream.Close): each is answered
// UPSTREAM_UNAVAILABLE.
func (h *httpReplica) abortAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, cancel := range h.cancels {
		cancel()
	}
}

// countedCall counts an HTTP call where it finishes, by its error.
type countedCall struct {
	backend.Call
	u     *Upstream
	ctx   context.Context
	start int64
}

func (c countedCall) Finish(result []byte, err error) {
	var o outcome
	var raw *backend.RawError
	switch {
	case err == nil:
		o = outcomeOK
	case errors.Is(c.ctx.Err(), context.Canceled):
		o = outcomeCancelled
	case err == backend.ErrUpstreamTimeout:
		o = outcomeTimeout
	case errors.As(err, &raw), err == errUpstreamProtocol:
		o = outcomeError
	default:
		o = outcomeUnavailable
	}
	c.u.counters.ended(o, c.start, nowNanos())
	c.Call.Finish(result, err)
}
