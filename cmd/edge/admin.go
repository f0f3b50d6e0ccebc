package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/openengine/edge/admin"
	"github.com/openengine/edge/loop"
	"github.com/openengine/edge/metrics"
	"github.com/openengine/edge/rpc"
	"github.com/openengine/edge/topics"
	"github.com/openengine/edge/upstream"
)

// adminStopTimeout bounds how long the admin listener waits for requests
// being served (a CPU profile, say) when edge stops.
const adminStopTimeout = 2 * time.Second

// stage is where the gateway is in its life, for /readyz. Legal transitions:
// stageStarting -> stageServing -> stageDraining -> stageStopped, and
// stageServing -> stageStopped when the event loops stop unexpectedly.
type stage int32

const (
	stageStarting stage = iota // the data listeners are not up yet
	stageServing               // the data listeners are up
	stageDraining              // shutdown began: no new connections or requests
	stageStopped               // the gateway has stopped
)

// readiness answers /readyz (CONTRACT.md section 12): ready when the data
// listeners are up, the server is not draining, and every upstream a route
// sends to (the default route's too) has a connected replica connection.
// The memory backend is always ready.
type readiness struct {
	stage   atomic.Int32         // a stage
	srv     *rpc.Server          // immutable after newReadiness
	targets []*upstream.Upstream // immutable after newReadiness: each once, in order
	topics  *topics.Topics       // immutable after run set it: --nats, nil without
}

// newReadiness returns the readiness of srv with the upstreams of ups that
// routes (and the default route) send to.
func newReadiness(srv *rpc.Server, ups *upstream.Set, routes []upstream.Route) *readiness {
	r := &readiness{srv: srv}
	all := ups.Upstreams()
	seen := make(map[string]bool)
	add := func(name string) {
		if name == upstream.Memory || seen[name] {
			return
		}
		for _, u := range all {
			if u.Name() == name {
				seen[name] = true
				r.targets = append(r.targets, u)
			}
		}
	}
	if len(all) > 0 {
		add(all[0].Name()) // the default route: methods no route matches
	}
	for _, rt := range routes {
		add(rt.Target)
	}
	return r
}

// set moves the gateway to stage s. Safe for concurrent use.
func (r *readiness) set(s stage) { r.stage.Store(int32(s)) }

// reasons says why the gateway should not get traffic now, nothing when it
// should. Safe for concurrent use; it reads atomics only, never blocks and
// never touches the event loops.
func (r *readiness) reasons() []string {
	var out []string
	switch st := stage(r.stage.Load()); {
	case st == stageStopped:
		out = append(out, "stopped")
	case st == stageDraining || r.srv.Draining():
		out = append(out, "draining")
	case st == stageStarting:
		out = append(out, "starting: the listeners are not up yet")
	}
	for _, u := range r.targets {
		if up, total := u.Connected(); up == 0 {
			why := fmt.Sprintf("upstream %s: %d of %d connections up", u.Name(), up, total)
			if down := u.Down(); down != "" {
				why += " (" + down + ")"
			}
			out = append(out, why)
		}
	}
	if r.topics != nil {
		if why := r.topics.NotReady(); why != "" {
			out = append(out, r.topics.Describe()+": "+why)
		}
	}
	return out
}

// startAdmin starts the admin listener of --admin-listen, or returns nil
// when it is off. Endpoints of later work (/metrics, the dashboard at /) are
// registered here with adm.Handle, before Start.
func startAdmin(o *options, logger *slog.Logger, ready *readiness, pages map[string]http.Handler) (*admin.Server, error) {
	if o.adminListen == "" {
		return nil, nil
	}
	cfg := admin.Config{
		Listen: o.adminListen,
		Pprof:  o.adminPprof,
		Ready:  ready.reasons,
		Logger: logger,
	}
	access := "open (a loopback address)"
	switch {
	case o.adminToken != nil:
		cfg.Token = o.adminToken.get
		access = "token (--admin-token): every endpoint but /healthz"
	case o.adminInsecure:
		access = "open to the network (--admin-insecure)"
	}
	adm, err := admin.New(cfg)
	if err != nil {
		return nil, err
	}
	for pattern, h := range pages {
		adm.Handle(pattern, h)
	}
	if err := adm.Start(); err != nil {
		return nil, fmt.Errorf("admin-listen: %w", err)
	}
	addr := adm.Addr().String()
	logger.Info("admin listening", "addr", addr, "url", "http://"+addr+"/", "endpoints", strings.Join(adm.Patterns(), " "), "access", access)
	return adm, nil
}

// instanceOf names this edge for the dashboard (metrics.Instance): its data
// listeners, as bound once gw has started and as configured before; the
// admin listener's address, likewise; and the version line. Addresses and
// the version only, never a credential.
func instanceOf(o *options, gw *loop.Server, adm *admin.Server) metrics.Instance {
	in := metrics.Instance{Admin: o.adminListen, Version: versionLine()}
	if adm != nil {
		if a := adm.Addr(); a != nil {
			in.Admin = a.String()
		}
	}
	ws, nd := o.loop.Listen, o.loop.NDJSONListen
	if a := gw.Addr(); a != nil {
		ws = a.String()
	}
	if a := gw.NDJSONAddr(); a != nil {
		nd = a.String()
	}
	scheme := "ws://"
	if o.loop.TLS != nil {
		scheme = "wss://"
	}
	in.Listen = append(in.Listen, scheme+ws+o.loop.WSPath)
	if nd != "" {
		in.Listen = append(in.Listen, "tcp://"+nd)
	}
	return in
}

// stopAdmin closes the admin listener, if there is one, once the gateway
// has stopped.
func stopAdmin(adm *admin.Server, logger *slog.Logger) {
	if adm == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), adminStopTimeout)
	defer cancel()
	if err := adm.Shutdown(ctx); err != nil {
		logger.Warn("admin listener: requests cut short", "err", err)
	}
}

// minAdminToken is the shortest --admin-token accepted, in bytes: a token
// is a secret to guess, not a password to remember.
const minAdminToken = 16

// adminToken is the token of --admin-token (CONTRACT.md section 12), read
// from its file at start-up and again on SIGHUP.
type adminToken struct {
	path string                 // immutable
	tok  atomic.Pointer[[]byte] // the token in force
}

// loadAdminToken reads the token of path.
func loadAdminToken(path string) (*adminToken, error) {
	t := &adminToken{path: path}
	if err := t.Reload(); err != nil {
		return nil, err
	}
	return t, nil
}

// Reload reads the file again; a file that fails to load keeps the token
// in force. The error never holds the file's content. Safe for concurrent
// use.
func (t *adminToken) Reload() error {
	b, err := os.ReadFile(t.path)
	if err != nil {
		return fmt.Errorf("admin-token: %w", err)
	}
	tok := bytes.TrimSpace(b)
	switch {
	case len(tok) == 0:
		return fmt.Errorf("admin-token %s: the file is empty", t.path)
	case bytes.ContainsFunc(tok, func(r rune) bool { return r <= ' ' || r == 0x7f }):
		return fmt.Errorf("admin-token %s: want one token on one line, without spaces or control characters", t.path)
	case len(tok) < minAdminToken:
		return fmt.Errorf("admin-token %s: the token is %d bytes, want at least %d (openssl rand -hex 32 > %s)", t.path, len(tok), minAdminToken, t.path)
	}
	t.tok.Store(&tok)
	return nil
}

// get returns the token in force (admin.Config.Token). Safe for
// concurrent use.
func (t *adminToken) get() []byte { return *t.tok.Load() }
