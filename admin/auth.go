package admin

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"
)

// The admin token (CONTRACT.md section 12): with Config.Token, every
// endpoint but /healthz (a liveness probe carries no credentials) answers 401
// with WWW-Authenticate: Bearer unless the request carries the token:
//
//	Authorization: Bearer TOKEN      Prometheus (authorization.credentials_file), curl
//	Authorization: Basic (any user, TOKEN as the password)
//
// Basic is for a browser on the dashboard: the 401 also offers a Basic
// challenge, so the browser asks for the token once, and sends it with the
// page's own fetches of api/stats (same origin) and the rest of the session.
// Unlike a ?token= query parameter turned into a cookie, the token then
// appears in no URL (browser history, shell history, proxy logs) and the page
// needs no script of its own. The comparison takes the same time whatever the
// token sent (both sides are hashed first, so not even the length shows).

// realm names the protection space in the challenges.
const realm = `realm="edge admin"`

// requireToken wraps next so that every request but GET /healthz needs the
// token that token returns.
func requireToken(token func() []byte, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" || authorized(r, token()) {
			next.ServeHTTP(w, r)
			return
		}
		w.Header().Add("WWW-Authenticate", "Bearer "+realm)
		w.Header().Add("WWW-Authenticate", "Basic "+realm+`, charset="UTF-8"`)
		w.Header().Set("Cache-Control", "no-store")
		http.Error(w, "401 Unauthorized: send Authorization: Bearer <the token of --admin-token>", http.StatusUnauthorized)
	})
}

// authorized reports whether r carries want as a Bearer token or as a Basic
// password. An empty want authorizes nothing.
func authorized(r *http.Request, want []byte) bool {
	if len(want) == 0 {
		return false
	}
	got, ok := bearer(r.Header.Get("Authorization"))
	if !ok {
		_, got, ok = r.BasicAuth()
	}
	if !ok {
		return false
	}
	g, w := sha256.Sum256([]byte(got)), sha256.Sum256(want)
	return subtle.ConstantTimeCompare(g[:], w[:]) == 1
}

// bearer returns the token of an Authorization: Bearer header (the scheme
// is case-insensitive, RFC 6750 section 2.1).
func bearer(h string) (string, bool) {
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimLeft(tok, " ")
	return tok, tok != ""
}
