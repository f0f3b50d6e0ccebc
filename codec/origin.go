package codec

import (
	"bytes"
	"strings"
)

// OriginAllowed applies the Origin check of CONTRACT.md section 11.2 to an
// upgrade request: no Origin passes (a client that is not a browser); an
// Origin whose host[:port] equals the request's Host passes (the page was
// served by this gateway's own address); one listed in allow passes (exact
// "scheme://host[:port]", the host compared case-insensitively), and "*" in
// allow lets any pass. Anything else, "null" included, is refused (403). A
// repeated Origin header is refused unless "*" is allowed. It does not
// allocate. Safe for concurrent use.
func OriginAllowed(r *Request, allow []string) bool {
	for _, a := range allow {
		if a == "*" {
			return true
		}
	}
	if r.Origin == nil {
		return r.Repeated&RepeatedOrigin == 0
	}
	if r.Repeated&RepeatedOrigin != 0 {
		return false
	}
	o := r.Origin
	if i := bytes.Index(o, []byte("://")); i > 0 && len(r.Host) > 0 && foldEqual(o[i+3:], r.Host) {
		return true
	}
	for _, a := range allow {
		if originEqual(o, a) {
			return true
		}
	}
	return false
}

// originEqual compares an Origin value with an allowed origin: the scheme
// exactly, host and port case-insensitively.
func originEqual(o []byte, a string) bool {
	i := bytes.Index(o, []byte("://"))
	j := strings.Index(a, "://")
	if i <= 0 || j <= 0 || string(o[:i]) != a[:j] {
		return false
	}
	return foldEqual(o[i+3:], []byte(a[j+3:]))
}

// foldEqual compares a and b with ASCII letters folded to lower case.
func foldEqual(a, b []byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}
