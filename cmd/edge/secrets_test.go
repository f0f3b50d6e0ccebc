package main

// Credentials never printed (CONTRACT.md section 12): the userinfo of the
// --upstream and --nats URLs reaches no output of edge.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/openengine/edge/internal/testgw"
	"github.com/openengine/edge/internal/testnats"
)

// secret is the password of the URLs of the tests here: no output may hold
// it.
const secret = "hunter2-never-printed"

// TestCredentialsNeverPrinted: an edge (the binary, so that pprof's cmdline
// is its own command line) with a password in --nats and in ws, http and
// nats --upstream URLs prints none of them: not in its log lines (upstream
// connected or unavailable, the topics' connection), /readyz (the topics'
// reason once NATS is gone), /metrics, /api/stats, /debug/pprof/cmdline, nor
// `edge config`; each shows the URL as USER:***@ (***@ for a token). The
// credentials still authenticate: the NATS server requires them. Before the
// fix every one of these but /metrics and /api/stats (which name upstreams
// only) showed the password; the nats upstream did not authenticate at all
// (its userinfo was dropped).
func TestCredentialsNeverPrinted(t *testing.T) {
	bin := buildEdge(t) // before the watchdog: a cold build can take longer than its bound
	watchdog(t)
	ns := testnats.StartWith(t, testnats.Config{User: "edge", Password: secret})
	natsHost := strings.TrimPrefix(ns.ClientURL(), "nats://")
	down := testgw.FreeAddr(t, "127.0.0.1") // closed: the ws and http upstreams never answer
	args := []string{"--listen", "127.0.0.1:0", "--loops", "1", "--admin-listen", "127.0.0.1:0", "--admin-pprof",
		"--upstream-backoff-max", "50ms",
		"--nats", "nats://edge:" + secret + "@" + natsHost,
		"--upstream", "w=ws://wsuser:" + secret + "@" + down + "/rpc",
		"--upstream", "h=http://" + secret + "@" + down + "/rpc", // a token as the user
		"--upstream", "n=nats://edge:" + secret + "@" + natsHost + "/work",
		"--route", "edge/echo=h", "--route", "work/*=n",
	}
	noSecret := func(what, text string) {
		t.Helper()
		if strings.Contains(text, secret) {
			t.Errorf("%s shows the password:\n%s", what, text)
		}
	}

	var cfg strings.Builder
	if err := run(t.Context(), append([]string{"config"}, args...), strings.NewReader(""), &cfg, io.Discard); err != nil {
		t.Fatalf("edge config: %v", err)
	}
	noSecret("edge config", cfg.String())
	for _, want := range []string{`nats = "nats://edge:***@` + natsHost + `"`, `"w=ws://wsuser:***@` + down + `/rpc"`,
		`"h=http://***@` + down + `/rpc"`, `"n=nats://edge:***@` + natsHost + `/work"`} {
		if !strings.Contains(cfg.String(), want) {
			t.Errorf("edge config lacks %s:\n%s", want, cfg.String())
		}
	}

	e := startChild(t, exec.Command(bin, args...))
	var admin string
	e.waitFor("the admin log line and the upstreams' and topics' first lines", func() (bool, string) {
		logs := e.stderr.String()
		if m := adminLine.FindStringSubmatch(logs); m != nil {
			admin = "http://" + m[1]
		}
		return admin != "" &&
			strings.Contains(logs, `msg="upstream unavailable" upstream=w conn=ws://wsuser:***@`+down+`/rpc#1`) &&
			strings.Contains(logs, `msg="upstream connected" upstream=n conn=nats://edge:***@`+natsHost+`/work`) &&
			strings.Contains(logs, `msg="nats topics: connected" nats=nats://edge:***@`+natsHost), logs
	})
	c := fdDial(t, e.url)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
	defer cancel()
	var res json.RawMessage
	if err := c.Call(ctx, "edge/echo", map[string]int{"n": 1}, &res); err == nil {
		t.Fatalf("edge/echo through the closed http upstream answered %s", res)
	}
	e.waitFor("the http upstream's unavailable line", func() (bool, string) {
		return strings.Contains(e.stderr.String(), `msg="upstream unavailable" upstream=h conn=http://***@`+down+`/rpc`), ""
	})

	get := func(path string) string {
		t.Helper()
		res, err := httpClient.Get(admin + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer res.Body.Close()
		body, err := io.ReadAll(res.Body)
		if err != nil || res.StatusCode/100 == 4 {
			t.Fatalf("GET %s: %d %v", path, res.StatusCode, err)
		}
		noSecret(path, string(body))
		return string(body)
	}
	if body := get("/debug/pprof/cmdline"); !strings.Contains(body, "\x00--upstream\x00w=ws://wsuser:***@"+down+"/rpc\x00") {
		t.Errorf("/debug/pprof/cmdline is not the masked command line: %q", body)
	}
	get("/debug/pprof/")
	get("/metrics")
	if body := get("/api/stats"); !strings.Contains(body, `"instance":{"listen":["ws://`) {
		t.Errorf("/api/stats does not name the instance: %s", body)
	}
	get("/api/history")
	ns.Shutdown()
	reason := regexp.QuoteMeta(`nats topics nats://edge:***@` + natsHost + `: not connected`)
	e.waitFor("/readyz naming the topics", func() (bool, string) {
		body := get("/readyz")
		return regexp.MustCompile(reason).MatchString(body), body
	})
	e.stop()
	noSecret("the log", e.stderr.String())
}

// TestCredentialsNotInErrors: a bad --upstream value, from the command line,
// the environment or the --config file, is refused with an error that shows
// the URL masked (edge prints the error on stderr).
func TestCredentialsNotInErrors(t *testing.T) {
	file := writeFile(t, "edge.toml", `upstream = ["ws://u:`+secret+`@127.0.0.1:1/"]`+"\n")
	for _, tt := range []struct {
		name    string
		args    []string
		environ []string
	}{
		{"no NAME", []string{"--upstream", "ws://u:" + secret + "@127.0.0.1:1/"}, nil},
		{"bad scheme", []string{"--upstream", "a=ftp://u:" + secret + "@127.0.0.1:1/"}, nil},
		{"no port", []string{"--upstream", "a=ws://u:" + secret + "@127.0.0.1/"}, nil},
		{"environment", nil, []string{"EDGE_UPSTREAM=ws://u:" + secret + "@127.0.0.1:1/"}},
		{"config file", []string{"--config", file}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := run(t.Context(), append([]string{"config"}, tt.args...), strings.NewReader(""), io.Discard, io.Discard)
			if tt.environ != nil {
				err = masked(runConfig(tt.args, tt.environ, io.Discard, io.Discard))
			}
			if err == nil {
				t.Fatal("no error")
			}
			if strings.Contains(err.Error(), secret) || !strings.Contains(err.Error(), "u:***@127.0.0.1") {
				t.Errorf("error shows the password, or not the masked URL: %v", err)
			}
		})
	}
}

// TestLogAttrsMasked: a log line's string, error and Stringer attributes
// show URL credentials masked, whatever logs them (a library's error quoting
// a URL as given).
func TestLogAttrsMasked(t *testing.T) {
	var b strings.Builder
	log := newLogger(&b, 0)
	log.Info("x", "s", "nats://u:"+secret+"@h:1", "err", &http.ProtocolError{ErrorString: "Post ws://" + secret + "@h:1/"},
		"group", map[string]string{}, "n", 3)
	if strings.Contains(b.String(), secret) || !strings.Contains(b.String(), "s=nats://u:***@h:1") || !strings.Contains(b.String(), "ws://***@h:1/") {
		t.Errorf("log line: %s", b.String())
	}
}

// BenchmarkLogLine is one log line of the upstream's kind through a plain
// text handler and through newLogger's (maskAttr on every attribute), side
// by side: without a URL and with a password in one.
func BenchmarkLogLine(b *testing.B) {
	plain := slog.New(slog.NewTextHandler(io.Discard, nil))
	masking := newLogger(io.Discard, slog.LevelInfo)
	for _, conn := range []string{"exec:edge --stdio", "ws://u:" + secret + "@127.0.0.1:9000/rpc#1"} {
		for name, log := range map[string]*slog.Logger{"plain": plain, "masked": masking} {
			b.Run(fmt.Sprintf("url=%v/%s", strings.Contains(conn, "://"), name), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					log.Warn("upstream unavailable", "upstream", "engine", "conn", conn, "err", io.ErrUnexpectedEOF)
				}
			})
		}
	}
}
