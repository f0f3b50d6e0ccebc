package loop

import (
	"bytes"
	"net/url"
	"time"

	"github.com/openengine/edge/codec"
)

// bearerToken returns the token of an upgrade request (CONTRACT.md section
// 11.3): from "Authorization: Bearer <token>", or, when param is set and
// the header carries none, from that query parameter. "" when there is
// none. The token is never logged.
func bearerToken(r *codec.Request, param string) string {
	if a := r.Authorization; len(a) > 7 && bytes.EqualFold(a[:7], []byte("bearer ")) {
		return string(bytes.TrimSpace(a[7:]))
	}
	if param == "" {
		return ""
	}
	_, query, ok := bytes.Cut(r.RawPath, []byte{'?'})
	if !ok {
		return ""
	}
	values, err := url.ParseQuery(string(query))
	if err != nil {
		return ""
	}
	return values.Get(param)
}

// identityExpired reports whether the connection's identity has ended by
// now (unix nanoseconds).
func (w *conn) identityExpired(now int64) bool {
	return w.x != nil && w.x.expires != 0 && now >= w.x.expires
}

// Whoami implements rpc.Peer (edge/whoami).
func (w *conn) Whoami() (subject string, ok bool, expires time.Time, remote string) {
	if w.x != nil && w.x.who != nil {
		who := w.x.who
		subject, ok, expires = who.Subject, true, who.Expires
	}
	if w.remote.IsValid() {
		remote = w.remote.String()
	}
	return subject, ok, expires, remote
}
