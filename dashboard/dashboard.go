// Package dashboard serves edge's live dashboard (CONTRACT.md section 12): one
// page, embedded in the binary, that draws the last five minutes the server
// kept (the admin listener's api/history) on load, then polls api/stats every
// second, and shows connections, requests/s, latency, in-flight requests,
// subscriptions, slow consumers, closes by code and upstream health. Its
// header and title name the instance (listen addresses, admin address,
// version) that those documents carry.
//
// The page works with no network access: its HTML, CSS and JavaScript are the
// files under static/, the charts are its own small SVG code, and every
// response carries a Content-Security-Policy that lets the page load and fetch
// from its own origin only. It fetches its JSON by relative URLs, so it works
// behind a path prefix as long as it is reached with the trailing slash
// (mount it with http.StripPrefix("/admin", ...) and link to /admin/).
package dashboard

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"net/http"
	"time"
)

//go:embed static
var static embed.FS

// assets are the files the page is made of, by the path they are served at,
// with their content types spelled here rather than guessed from the host's
// mime tables (a JavaScript module served with another type does not run).
var assets = []struct{ path, file, contentType string }{
	{"/", "static/index.html", "text/html; charset=utf-8"},
	{"/style.css", "static/style.css", "text/css; charset=utf-8"},
	{"/format.js", "static/format.js", "text/javascript; charset=utf-8"},
	{"/plot.js", "static/plot.js", "text/javascript; charset=utf-8"},
	{"/dashboard.js", "static/dashboard.js", "text/javascript; charset=utf-8"},
}

// csp keeps the page to its own origin: no script, style, image or fetch
// from anywhere else, and no inline script.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// asset is one served file: immutable after Handler.
type asset struct {
	body        []byte
	contentType string
	etag        string
}

// Handler returns the handler of the dashboard: the page at "/" and its
// scripts and stylesheet beside it, for GET and HEAD; any other path is 404
// and any other method 405. The JSON the page reads, api/history and
// api/stats, is not served here: the admin listener routes it to the
// metrics. Safe for concurrent use.
func Handler() http.Handler {
	files := make(map[string]asset, len(assets))
	for _, a := range assets {
		body, err := static.ReadFile(a.file)
		if err != nil {
			panic("dashboard: embedded file missing: " + a.file) // the embed pattern above guarantees it
		}
		sum := sha256.Sum256(body)
		files[a.path] = asset{body: body, contentType: a.contentType, etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f, ok := files[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, http.StatusText(http.StatusMethodNotAllowed), http.StatusMethodNotAllowed)
			return
		}
		h := w.Header()
		h.Set("Content-Type", f.contentType)
		h.Set("Content-Security-Policy", csp)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Cache-Control", "no-cache") // revalidate by ETag, so a new binary's page is picked up
		h.Set("ETag", f.etag)
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(f.body))
	})
}
