package dashboard

import (
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

// TestHandlerServesThePage: the page and each asset come with their content
// type, the policy that keeps the page to its own origin, and their bytes;
// HEAD has no body; an unknown path is 404 and a POST 405.
func TestHandlerServesThePage(t *testing.T) {
	srv := httptest.NewServer(Handler())
	defer srv.Close()
	tests := []struct {
		name, method, path string
		status             int
		contentType        string
		contains           string
	}{
		{"page", "GET", "/", 200, "text/html; charset=utf-8", `<script type="module" src="dashboard.js">`},
		{"stylesheet", "GET", "/style.css", 200, "text/css; charset=utf-8", ".chart"},
		{"main script", "GET", "/dashboard.js", 200, "text/javascript; charset=utf-8", `fetch("api/stats"`},
		{"main script reads the history", "GET", "/dashboard.js", 200, "text/javascript; charset=utf-8", `fetch("api/history"`},
		{"chart script", "GET", "/plot.js", 200, "text/javascript; charset=utf-8", "export function plot"},
		{"format script", "GET", "/format.js", 200, "text/javascript; charset=utf-8", "export function latency"},
		{"head", "HEAD", "/", 200, "text/html; charset=utf-8", ""},
		{"index by name", "GET", "/index.html", 404, "", ""},
		{"stats are not ours", "GET", "/api/stats", 404, "", ""},
		{"history is not ours", "GET", "/api/history", 404, "", ""},
		{"unknown", "GET", "/nope.js", 404, "", ""},
		{"post", "POST", "/", 405, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest(tt.method, srv.URL+tt.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, tt.status)
			}
			if tt.status != 200 {
				return
			}
			h := resp.Header
			if got := h.Get("Content-Type"); got != tt.contentType {
				t.Errorf("Content-Type %q, want %q", got, tt.contentType)
			}
			if got := h.Get("Content-Security-Policy"); !strings.Contains(got, "default-src 'none'") || !strings.Contains(got, "connect-src 'self'") {
				t.Errorf("Content-Security-Policy %q does not keep the page to its origin", got)
			}
			if h.Get("X-Content-Type-Options") != "nosniff" || h.Get("ETag") == "" {
				t.Errorf("headers %v: want nosniff and an ETag", h)
			}
			if tt.method == "HEAD" && len(body) != 0 {
				t.Errorf("HEAD has a body of %d bytes", len(body))
			}
			if !strings.Contains(string(body), tt.contains) {
				t.Errorf("body does not contain %q", tt.contains)
			}
		})
	}
}

// TestHandlerRevalidates: a browser that has the page answers its ETag and
// gets 304, so polling the page's assets costs nothing.
func TestHandlerRevalidates(t *testing.T) {
	h := Handler()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/plot.js", nil))
	req := httptest.NewRequest("GET", "/plot.js", nil)
	req.Header.Set("If-None-Match", rec.Header().Get("ETag"))
	again := httptest.NewRecorder()
	h.ServeHTTP(again, req)
	if again.Code != http.StatusNotModified {
		t.Fatalf("status %d, want 304", again.Code)
	}
}

// TestEveryEmbeddedFileIsServed: the list of assets and the files under
// static/ agree, so no file is embedded for nothing and none is missing.
func TestEveryEmbeddedFileIsServed(t *testing.T) {
	served := map[string]bool{}
	for _, a := range assets {
		served[a.file] = true
	}
	err := fs.WalkDir(static, "static", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if !served[path] {
			t.Errorf("%s is embedded but not served", path)
		}
		delete(served, path)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for f := range served {
		t.Errorf("%s is served but not embedded", f)
	}
}

// external matches what would make the page reach beyond its own origin: an
// absolute or protocol-relative URL, a CSS import, or a CDN's name.
var external = regexp.MustCompile(`(?i)(https?:|wss?:|ftp:)//|["'(=\s]//[a-z0-9]|@import|\bcdn\b|googleapis|jsdelivr|unpkg|cdnjs`)

// TestPageReferencesNothingExternal: the page works offline, so no embedded
// file names another origin. The one absolute URL allowed is the SVG
// namespace name, which is an identifier that is never fetched.
func TestPageReferencesNothingExternal(t *testing.T) {
	const svgNamespace = "http://www.w3.org/2000/svg"
	err := fs.WalkDir(static, "static", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		body, err := static.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(body), "\n") {
			line = strings.ReplaceAll(line, svgNamespace, "")
			if m := external.FindString(line); m != "" {
				t.Errorf("%s:%d references %q: %s", path, i+1, m, strings.TrimSpace(line))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestExternalPattern: the pattern of TestPageReferencesNothingExternal
// catches the ways a page reaches out, and not the page's own relative URLs
// or its comments.
func TestExternalPattern(t *testing.T) {
	tests := []struct {
		name, line string
		external   bool
	}{
		{"absolute script", `<script src="https://cdn.example.org/chart.js">`, true},
		{"plain http", `fetch("http://10.0.0.1/api/stats")`, true},
		{"protocol relative", `<link href="//fonts.example.com/x.css">`, true},
		{"css url", `background: url(//img.example.com/a.png)`, true},
		{"css import", `@import "theme.css";`, true},
		{"websocket", `new WebSocket("wss://example.org/")`, true},
		{"cdn word", `// loaded from the cdn`, true},
		{"relative fetch", `fetch("api/stats", { cache: "no-store" })`, false},
		{"relative module", `import { plot } from "./plot.js";`, false},
		{"comment", `  // A small time-series chart`, false},
		{"data url", `<link rel="icon" href="data:,">`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := external.MatchString(tt.line); got != tt.external {
				t.Errorf("external(%q) = %v, want %v", tt.line, got, tt.external)
			}
		})
	}
}
