package main

import (
	"io"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/openengine/edge/internal/poll"
)

// TestAdminListenNonLoopback: --admin-listen on an address other than
// loopback is refused at start-up, naming both ways out, unless
// --admin-token or --admin-insecure is given (CONTRACT.md section 12); on
// the old code every one of these started.
func TestAdminListenNonLoopback(t *testing.T) {
	token := writeFile(t, "admin-token", "0123456789abcdef0123456789abcdef\n")
	for _, tt := range []struct {
		args []string
		ok   bool
	}{
		{[]string{"--admin-listen", "127.0.0.1:0"}, true},
		{[]string{"--admin-listen", "[::1]:0"}, true},
		{[]string{"--admin-listen", "localhost:0"}, true},
		{[]string{"--admin-listen", "0.0.0.0:9090"}, false},
		{[]string{"--admin-listen", ":9090"}, false},
		{[]string{"--admin-listen", "10.1.2.3:9090"}, false},
		{[]string{"--admin-listen", "[::]:9090"}, false},
		{[]string{"--admin-listen", "0.0.0.0:9090", "--admin-insecure"}, true},
		{[]string{"--admin-listen", "0.0.0.0:9090", "--admin-token", token}, true},
	} {
		_, err := loadConfig(tt.args, nil, io.Discard)
		if tt.ok && err != nil {
			t.Errorf("edge %q: %v", tt.args, err)
		}
		if !tt.ok && (err == nil || !strings.Contains(err.Error(), "--admin-token FILE") || !strings.Contains(err.Error(), "--admin-insecure")) {
			t.Errorf("edge %q: error %v, want one naming --admin-token FILE and --admin-insecure", tt.args, err)
		}
	}
	if _, err := loadConfig([]string{"--admin-token", token}, nil, io.Discard); err == nil || !strings.Contains(err.Error(), "--admin-token needs --admin-listen") {
		t.Errorf("--admin-token without --admin-listen: %v", err)
	}
}

// TestAdminTokenFileRefused: an --admin-token file that is missing, empty,
// short or holds more than one word is refused at start-up (and by edge
// config), naming the flag and never quoting the file's content.
func TestAdminTokenFileRefused(t *testing.T) {
	for _, tt := range []struct{ name, content, want string }{
		{"empty", "\n", "empty"},
		{"short", "s3cr3t-short\n", "at least 16"},
		{"two words", "s3cr3t-0123456789 s3cr3t-0123456789\n", "one token on one line"},
	} {
		path := writeFile(t, "admin-token", tt.content)
		err := run(t.Context(), []string{"config", "--admin-listen", "127.0.0.1:0", "--admin-token", path}, strings.NewReader(""), io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "admin-token") || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("%s: error %v, want one naming admin-token and saying %q without the content", tt.name, err, tt.want)
		}
	}
	err := run(t.Context(), []string{"config", "--admin-listen", "127.0.0.1:0", "--admin-token", "/nonexistent/admin-token"}, strings.NewReader(""), io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "admin-token") {
		t.Errorf("missing file: %v", err)
	}
}

// TestAdminToken: with --admin-token every admin endpoint but /healthz
// (readiness, metrics, the dashboard and its api/stats, pprof) answers 401
// with WWW-Authenticate: Bearer without the token, and serves it as a
// Bearer token or as a Basic password (a browser's prompt); SIGHUP reloads
// the file. edge config names the file, never the token, and the start-up
// log says the admin listener needs the token. On the old code the flag did
// not exist (run refused it) and every endpoint answered without a token.
func TestAdminToken(t *testing.T) {
	const tok1, tok2 = "tok-admin-0123456789abcdef", "tok-admin-fedcba9876543210"
	file := writeFile(t, "admin-token", tok1+"\n")
	args := []string{"--listen", "127.0.0.1:0", "--loops", "1", "--admin-listen", "127.0.0.1:0", "--admin-pprof", "--admin-token", file}
	var cfg strings.Builder
	if err := run(t.Context(), append([]string{"config"}, args...), strings.NewReader(""), &cfg, io.Discard); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(cfg.String(), `admin-token = "`+file+`"  # from --admin-token`) || strings.Contains(cfg.String(), "tok-admin") {
		t.Errorf("edge config:\n%s", cfg.String())
	}
	e := startEdge(t, args...)
	if !strings.Contains(e.stderr.String(), `access="token (--admin-token): every endpoint but /healthz"`) {
		t.Errorf("the admin log line does not say the token is required:\n%s", e.stderr.String())
	}
	get := func(path string, auth func(*http.Request)) *http.Response {
		t.Helper()
		req, err := http.NewRequest("GET", e.admin+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if auth != nil {
			auth(req)
		}
		res, err := httpClient.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if strings.Contains(string(body), "tok-admin") {
			t.Errorf("GET %s shows the admin token: %s", path, body)
		}
		return res
	}
	bearer := func(tok string) func(*http.Request) {
		return func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+tok) }
	}
	if res := get("/healthz", nil); res.StatusCode != http.StatusOK {
		t.Errorf("/healthz without a token: %d, want 200", res.StatusCode)
	}
	paths := []string{"/readyz", "/metrics", "/api/stats", "/api/history", "/", "/debug/pprof/", "/debug/pprof/cmdline"}
	for _, path := range paths {
		for _, auth := range []func(*http.Request){nil, bearer(tok2)} {
			if res := get(path, auth); res.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(res.Header.Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("%s without the token: %d %q, want 401 with WWW-Authenticate: Bearer", path, res.StatusCode, res.Header.Get("WWW-Authenticate"))
			}
		}
		if res := get(path, bearer(tok1)); res.StatusCode != http.StatusOK {
			t.Errorf("%s with the token: %d, want 200", path, res.StatusCode)
		}
		if res := get(path, func(r *http.Request) { r.SetBasicAuth("admin", tok1) }); res.StatusCode != http.StatusOK {
			t.Errorf("%s with the token as a Basic password: %d, want 200", path, res.StatusCode)
		}
	}
	if err := os.WriteFile(file, []byte(tok2+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, edgeWait, "the new admin token accepted after SIGHUP", func() (bool, string) {
		return get("/metrics", bearer(tok2)).StatusCode == http.StatusOK, ""
	})
	if res := get("/metrics", bearer(tok1)); res.StatusCode != http.StatusUnauthorized {
		t.Errorf("the old token after the reload: %d, want 401", res.StatusCode)
	}
	if strings.Contains(e.stderr.String(), "tok-admin") {
		t.Errorf("the token is in the log:\n%s", e.stderr.String())
	}
}
