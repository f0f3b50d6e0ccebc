package admin

import (
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openengine/edge/internal/testgw"
)

// TestToken: with Config.Token every endpoint but /healthz answers 401 with
// a Bearer challenge (and a Basic one, for browsers) to a request without
// the token, with a wrong one, or with a prefix of it; the token as a Bearer
// token or as a Basic password is let through; a changed token (a reload)
// applies to the next request.
func TestToken(t *testing.T) {
	var tok atomic.Pointer[[]byte]
	set := func(s string) { b := []byte(s); tok.Store(&b) }
	set("0123456789abcdef-admin")
	testgw.Watchdog(t, 30*time.Second)
	s, err := New(Config{Listen: "127.0.0.1:0", Pprof: true, Token: func() []byte { return *tok.Load() }})
	if err != nil {
		t.Fatal(err)
	}
	s.Handle("GET /metrics", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("m\n")) }))
	startServer(t, s)
	get := func(path string, auth func(*http.Request)) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequest("GET", "http://"+s.Addr().String()+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if auth != nil {
			auth(req)
		}
		res, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		body, err := io.ReadAll(res.Body)
		if err != nil {
			t.Fatal(err)
		}
		return res, string(body)
	}
	bearer := func(tok string) func(*http.Request) {
		return func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+tok) }
	}
	basic := func(tok string) func(*http.Request) { return func(r *http.Request) { r.SetBasicAuth("anyone", tok) } }
	if res, body := get("/healthz", nil); res.StatusCode != http.StatusOK || body != "ok\n" {
		t.Errorf("/healthz without a token: %d %q, want 200 ok", res.StatusCode, body)
	}
	paths := []string{"/readyz", "/metrics", "/debug/pprof/", "/debug/pprof/cmdline", "/nothing", "/healthz/../readyz"}
	for _, path := range paths {
		for name, auth := range map[string]func(*http.Request){
			"no token":     nil,
			"wrong token":  bearer("0123456789abcdef-other"),
			"a prefix":     bearer("0123456789abcdef"),
			"wrong scheme": func(r *http.Request) { r.Header.Set("Authorization", "Token 0123456789abcdef-admin") },
			"wrong basic":  basic("nope"),
		} {
			res, _ := get(path, auth)
			if res.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(res.Header.Values("WWW-Authenticate")[0], "Bearer ") {
				t.Errorf("%s, %s: %d %q, want 401 with a Bearer challenge", path, name, res.StatusCode, res.Header.Values("WWW-Authenticate"))
			}
		}
	}
	for _, path := range paths[:4] {
		for name, auth := range map[string]func(*http.Request){
			"bearer": bearer("0123456789abcdef-admin"), "bearer, lower case": func(r *http.Request) { r.Header.Set("Authorization", "bearer 0123456789abcdef-admin") },
			"basic": basic("0123456789abcdef-admin"),
		} {
			if res, _ := get(path, auth); res.StatusCode != http.StatusOK {
				t.Errorf("%s with the token (%s): %d, want 200", path, name, res.StatusCode)
			}
		}
	}
	set("fedcba9876543210-admin")
	if res, _ := get("/readyz", bearer("0123456789abcdef-admin")); res.StatusCode != http.StatusUnauthorized {
		t.Errorf("the old token after a change: %d, want 401", res.StatusCode)
	}
	if res, _ := get("/readyz", bearer("fedcba9876543210-admin")); res.StatusCode != http.StatusOK {
		t.Errorf("the new token: %d, want 200", res.StatusCode)
	}
}
