package test

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/openengine/edge/internal/poll"
	"github.com/openengine/edge/internal/testgw"
	"github.com/openengine/edge/loop"
	"github.com/openengine/edge/upstream"
)

// This file starts the parts of the upstream tests (CONTRACT.md section 10):
// real edge gateways as upstreams (in-process, over their real listeners, or
// the edge binary as an exec child) and a proxy gateway in front of them.

// upstreamEdge is an in-process edge serving as an upstream: its WebSocket
// and NDJSON listeners, and its memory backend for gates.
type upstreamEdge struct {
	gw *testgw.Gateway
	ws string // ws://host:port/
	nd string // tcp://host:port
}

func startUpstreamEdge(t *testing.T) *upstreamEdge {
	t.Helper()
	return startUpstreamEdgeWith(t, testgw.Config{NDJSON: true})
}

func startUpstreamEdgeWith(t *testing.T, cfg testgw.Config) *upstreamEdge {
	t.Helper()
	gw := testgw.Start(t, cfg)
	return &upstreamEdge{
		gw: gw,
		ws: "ws://" + gw.Srv.Addr().String() + "/",
		nd: "tcp://" + gw.Srv.NDJSONAddr().String(),
	}
}

// stop stops the upstream edge at once: its event loops end and every
// connection is closed without an answer, as when the process dies.
func (u *upstreamEdge) stop(t *testing.T) { testgw.Stop(t, u.gw.Srv) }

// restart starts a new upstream edge on the addresses of the stopped u.
func (u *upstreamEdge) restart(t *testing.T) *upstreamEdge {
	t.Helper()
	return startUpstreamEdgeWith(t, testgw.Config{Loop: loop.Config{
		Listen:       u.gw.Srv.Addr().String(),
		NDJSONListen: u.gw.Srv.NDJSONAddr().String(),
	}})
}

// waitGate polls until n requests wait on the upstream's gate name.
func (u *upstreamEdge) waitGate(t *testing.T, name string, n int) {
	t.Helper()
	poll.Until(t, pollTimeout, fmt.Sprintf("%d requests on upstream gate %q", n, name), func() (bool, string) {
		w := u.gw.Mem.Waiting(name)
		return w == n, fmt.Sprintf("%d waiting", w)
	})
}

// proxy is a gateway forwarding to upstreams.
type proxy struct {
	*gateway
	set *upstream.Set
}

// startProxy starts the upstreams of specs (NAME=URL, as --upstream) with
// routes (PATTERN=NAME, as --route) on a gateway forwarding to them, and
// waits until every connection is up. Both stop in t.Cleanup, the
// upstreams after the gateway.
func startProxy(t *testing.T, cfg upstream.Config, specs []string, routes ...string) *proxy {
	t.Helper()
	return startProxyOpts(t, cfg, -1, specs, routes)
}

// startProxyUp is startProxy that waits until up connections of the first
// upstream are up instead of all (-1: all of every upstream).
func startProxyUp(t *testing.T, cfg upstream.Config, up int, specs []string, routes ...string) *proxy {
	t.Helper()
	return startProxyOpts(t, cfg, up, specs, routes)
}

// startProxyWith is startProxy with options for the proxy gateway.
func startProxyWith(t *testing.T, cfg upstream.Config, specs, routes []string, opts ...func(*gwConfig)) *proxy {
	t.Helper()
	return startProxyOpts(t, cfg, -1, specs, routes, opts...)
}

// startProxyOpts is startProxyUp with options for the proxy gateway.
func startProxyOpts(t *testing.T, cfg upstream.Config, up int, specs, routes []string, opts ...func(*gwConfig)) *proxy {
	t.Helper()
	var sp []upstream.Spec
	for _, s := range specs {
		x, err := upstream.ParseSpec(s)
		if err != nil {
			t.Fatal(err)
		}
		sp = append(sp, x)
	}
	var rs []upstream.Route
	for _, s := range routes {
		r, err := upstream.ParseRoute(s)
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	logs := &testgw.Buffer{}
	if cfg.Logger == nil {
		cfg.Logger = testLogger(logs)
	}
	set, err := upstream.NewSet(sp, rs, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // after the gateway's: cleanups run last registered first
		set.Close()
		if t.Failed() {
			t.Logf("upstream logs:\n%s", logs.String())
		}
	})
	opts = append([]func(*gwConfig){func(c *gwConfig) { c.rpc.Forward = set.Forwarder }}, opts...)
	gw := startGateway(t, opts...)
	// The upstreams' connections live on the gateway's event loops: they
	// start once the loops run.
	set.StartOn(gw.srv)
	if up < 0 {
		waitConnected(t, set)
	} else {
		waitUp(t, set.Upstreams()[0], up)
	}
	return &proxy{gateway: gw, set: set}
}

// waitConnected polls until every connection of every upstream of set is up.
func waitConnected(t *testing.T, set *upstream.Set) {
	t.Helper()
	for _, u := range set.Upstreams() {
		poll.Until(t, pollTimeout, "upstream "+u.Name()+" connected", func() (bool, string) {
			up, total := u.Connected()
			return up == total, fmt.Sprintf("%d of %d connections up", up, total)
		})
	}
}

// waitUp polls until exactly n connections of u are up.
func waitUp(t *testing.T, u *upstream.Upstream, n int) {
	t.Helper()
	poll.Until(t, pollTimeout, fmt.Sprintf("%d connections of upstream %s up", n, u.Name()), func() (bool, string) {
		up, total := u.Connected()
		return up == n, fmt.Sprintf("%d of %d up", up, total)
	})
}

var (
	edgeBinOnce sync.Once
	edgeBinDir  string
	edgeBin     string
	edgeBinErr  error
)

// edgeBinary builds cmd/edge once per test binary, for exec upstreams.
func edgeBinary(t *testing.T) string {
	t.Helper()
	edgeBinOnce.Do(func() {
		edgeBinDir, edgeBinErr = os.MkdirTemp("", "edge-test-bin-")
		if edgeBinErr != nil {
			return
		}
		edgeBin = filepath.Join(edgeBinDir, "edge")
		out, err := exec.Command("go", "build", "-o", edgeBin, "../cmd/edge").CombinedOutput()
		if err != nil {
			edgeBinErr = err
			t.Logf("go build: %s", out)
		}
	})
	if edgeBinErr != nil {
		t.Fatalf("building edge: %v", edgeBinErr)
	}
	return edgeBin
}

// removeEdgeBinary removes what edgeBinary built (from TestMain).
func removeEdgeBinary() {
	if edgeBinDir != "" {
		os.RemoveAll(edgeBinDir)
	}
}

// testLogger writes text logs to w.
func testLogger(w io.Writer) *slog.Logger { return slog.New(slog.NewTextHandler(w, nil)) }
