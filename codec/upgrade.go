package codec

import (
	"bytes"
	"crypto/sha1"
	"encoding/base64"
	"strconv"
)

// DefaultMaxRequestHead is the request head cap ParseRequest applies when its max
// is not positive (CONTRACT.md section 1.1: 16 KiB).
const DefaultMaxRequestHead = 16 << 10

// Request is an HTTP/1.1 request head as ParseRequest found it. Every byte slice
// aliases the parsed input; header values are trimmed of surrounding spaces and
// tabs. Of a header that appears more than once the first value is kept; Connection
// and Upgrade are lists whose tokens are checked across all their occurrences
// (HasConnectionUpgrade, HasUpgradeWebsocket).
type Request struct {
	Method []byte
	// RawPath is the request target as sent (with the query string); Path is its
	// path alone: without the query string, and without scheme and authority for
	// a target in absolute form (RFC 9112 section 3.2.2).
	RawPath, Path []byte
	Proto         []byte // "HTTP/1.1"

	Host          []byte
	Upgrade       []byte
	Connection    []byte
	Key           []byte // Sec-WebSocket-Key
	Version       []byte // Sec-WebSocket-Version
	Origin        []byte
	Authorization []byte
	Extensions    []byte // Sec-WebSocket-Extensions (only ever declined)
	Protocol      []byte // Sec-WebSocket-Protocol (none is offered)
	// ForwardedFor is X-Forwarded-For; several such headers are joined
	// with ", " in order (RFC 9110 section 5.3), the only case that
	// allocates.
	ForwardedFor []byte

	// HasConnectionUpgrade: some Connection header lists the token "upgrade".
	HasConnectionUpgrade bool
	// HasUpgradeWebsocket: some Upgrade header lists the token "websocket".
	HasUpgradeWebsocket bool

	// Repeated has the bit of each single-valued header above that appeared more
	// than once (RepeatedHost, ...). A request that repeats Host or a
	// Sec-WebSocket-Key/Version is malformed (RFC 9112 section 3.2, RFC 6455
	// section 11.3.1); whether a repeated Origin or Authorization is, is up to the
	// caller's policy.
	Repeated uint16
}

// Bits of Request.Repeated.
const (
	RepeatedHost uint16 = 1 << iota
	RepeatedKey
	RepeatedVersion
	RepeatedOrigin
	RepeatedAuthorization
)

// ParseRequest parses an HTTP/1.1 request head from the front of b (RFC 9112
// sections 2-5). It returns the head and its size including the final empty line.
// Lines may end in CRLF or a bare LF; empty lines before the request line are
// skipped (RFC 9112 section 2.2).
//
// Errors: ErrNeedMore if the head is not complete yet; ErrHeaderTooLarge when the
// head cannot fit in max bytes (max bytes arrived without the end of the head, or
// a complete head is longer), so a slow client is stopped at max bytes;
// ErrBadRequest for a malformed request line or header line (no colon, space
// before the colon, obsolete line folding, bytes that are not allowed).
//
// The cost of a call is one scan for line ends up to max bytes; callers call it
// again with more bytes. max <= 0 means DefaultMaxRequestHead.
// Safe for concurrent use.
func ParseRequest(b []byte, max int) (Request, int, error) {
	if max <= 0 {
		max = DefaultMaxRequestHead
	}
	end := headEnd(b, max)
	if end < 0 {
		if len(b) >= max {
			return Request{}, 0, ErrHeaderTooLarge
		}
		return Request{}, 0, ErrNeedMore
	}
	var r Request
	if !r.parse(b[:end]) {
		return Request{}, 0, ErrBadRequest
	}
	return r, end, nil
}

// headEnd returns the size of the request head at the front of b (through the
// empty line that ends it) if that is at most max bytes, else -1.
func headEnd(b []byte, max int) int {
	if len(b) > max {
		b = b[:max]
	}
	i := 0
	// Empty lines before the request line do not end the head.
	for {
		if i < len(b) && b[i] == '\n' {
			i++
		} else if i+1 < len(b) && b[i] == '\r' && b[i+1] == '\n' {
			i += 2
		} else {
			break
		}
	}
	for {
		j := bytes.IndexByte(b[i:], '\n')
		if j < 0 {
			return -1
		}
		i += j + 1
		switch {
		case i < len(b) && b[i] == '\n':
			return i + 1
		case i+1 < len(b) && b[i] == '\r' && b[i+1] == '\n':
			return i + 2
		}
	}
}

// parse fills r from a complete head (as delimited by headEnd).
func (r *Request) parse(head []byte) bool {
	line, rest := nextLine(head)
	for len(line) == 0 && len(rest) > 0 {
		line, rest = nextLine(rest)
	}
	if !r.parseRequestLine(line) {
		return false
	}
	for {
		line, rest = nextLine(rest)
		if len(line) == 0 {
			return true
		}
		if !r.parseHeaderLine(line) {
			return false
		}
	}
}

// nextLine splits the first line off b, without its CRLF or LF.
func nextLine(b []byte) (line, rest []byte) {
	i := bytes.IndexByte(b, '\n')
	if i < 0 {
		return b, nil
	}
	line, rest = b[:i], b[i+1:]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	return line, rest
}

// parseRequestLine parses "method SP request-target SP HTTP-version"
// (RFC 9112 section 3).
func (r *Request) parseRequestLine(line []byte) bool {
	sp := bytes.IndexByte(line, ' ')
	if sp <= 0 {
		return false
	}
	r.Method = line[:sp]
	for _, c := range r.Method {
		if !isTokenChar(c) {
			return false
		}
	}
	line = line[sp+1:]
	sp = bytes.IndexByte(line, ' ')
	if sp <= 0 {
		return false
	}
	r.RawPath = line[:sp]
	for _, c := range r.RawPath {
		if c <= ' ' || c == 0x7f {
			return false
		}
	}
	r.Proto = line[sp+1:]
	if !validProto(r.Proto) {
		return false
	}
	p := r.RawPath
	if p[0] != '/' {
		// Absolute form "http://host/path?q": drop scheme and authority.
		if i := bytes.Index(p, []byte("://")); i > 0 {
			p = p[i+3:]
			if j := bytes.IndexByte(p, '/'); j >= 0 {
				p = p[j:]
			} else {
				p = p[len(p):]
			}
		}
	}
	if q := bytes.IndexByte(p, '?'); q >= 0 {
		p = p[:q]
	}
	r.Path = p
	return true
}

// validProto reports whether p is "HTTP/" DIGIT "." DIGIT (RFC 9112 section 2.3).
func validProto(p []byte) bool {
	return len(p) == 8 && string(p[:5]) == "HTTP/" && isDigit(p[5]) && p[6] == '.' && isDigit(p[7])
}

// parseHeaderLine parses "field-name ":" OWS field-value OWS" (RFC 9112 section 5).
func (r *Request) parseHeaderLine(line []byte) bool {
	colon := bytes.IndexByte(line, ':')
	if colon <= 0 {
		// No colon, or an empty name; a line starting with a space or tab is an
		// obsolete folding, which a server may reject (RFC 9112 section 5.2).
		return false
	}
	name := line[:colon]
	for _, c := range name {
		if !isTokenChar(c) {
			// Includes whitespace before the colon (RFC 9112 section 5.1).
			return false
		}
	}
	value := trimOWS(line[colon+1:])
	for _, c := range value {
		if c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	// Dispatch on the name's length first: one comparison per line.
	switch len(name) {
	case len("host"):
		if equalFold(name, "host") {
			r.Host = r.single(r.Host, value, RepeatedHost)
		}
	case len("origin"):
		if equalFold(name, "origin") {
			r.Origin = r.single(r.Origin, value, RepeatedOrigin)
		}
	case len("upgrade"):
		if equalFold(name, "upgrade") {
			if r.Upgrade == nil {
				r.Upgrade = value
			}
			if hasToken(value, "websocket") {
				r.HasUpgradeWebsocket = true
			}
		}
	case len("connection"):
		if equalFold(name, "connection") {
			if r.Connection == nil {
				r.Connection = value
			}
			if hasToken(value, "upgrade") {
				r.HasConnectionUpgrade = true
			}
		}
	case len("authorization"):
		if equalFold(name, "authorization") {
			r.Authorization = r.single(r.Authorization, value, RepeatedAuthorization)
		}
	case len("sec-websocket-key"):
		if equalFold(name, "sec-websocket-key") {
			r.Key = r.single(r.Key, value, RepeatedKey)
		}
	case len("sec-websocket-version"):
		if equalFold(name, "sec-websocket-version") {
			r.Version = r.single(r.Version, value, RepeatedVersion)
		}
	case len("sec-websocket-protocol"):
		if equalFold(name, "sec-websocket-protocol") && r.Protocol == nil {
			r.Protocol = value
		}
	case len("x-forwarded-for"):
		if equalFold(name, "x-forwarded-for") {
			if r.ForwardedFor == nil {
				r.ForwardedFor = value
			} else {
				r.ForwardedFor = append(append(append([]byte(nil), r.ForwardedFor...), ", "...), value...)
			}
		}
	case len("sec-websocket-extensions"):
		if equalFold(name, "sec-websocket-extensions") && r.Extensions == nil {
			r.Extensions = value
		}
	}
	return true
}

// single keeps the first value of a single-valued header and records a repeat.
func (r *Request) single(old, value []byte, bit uint16) []byte {
	if old != nil {
		r.Repeated |= bit
		return old
	}
	return value
}

// CheckUpgrade classifies a parsed request for the WebSocket endpoint at path
// (CONTRACT.md section 1.1, RFC 6455 section 4.2.1) and returns the HTTP status to
// answer: 404 when the path (without query string) is not path, whatever the
// method; 400 for a request on path that is not a valid upgrade (not GET, older
// than HTTP/1.1, no or repeated Host, no "Upgrade: websocket", no "upgrade" token
// in Connection, no or repeated Sec-WebSocket-Version, a Sec-WebSocket-Key that is
// not base64 of 16 bytes or is repeated); 426 when Sec-WebSocket-Version is present
// but not 13 (AppendHTTPError adds "Sec-WebSocket-Version: 13"); 101 for a valid
// upgrade, to be answered with AppendAccept. Origin and Authorization are the
// caller's policy.
// Safe for concurrent use.
func CheckUpgrade(r *Request, path string) (status int) {
	switch {
	case string(r.Path) != path:
		return 404
	case string(r.Method) != "GET":
		return 400
	case !validProto(r.Proto) || r.Proto[5] == '0' || string(r.Proto) == "HTTP/1.0":
		return 400
	case r.Host == nil || r.Repeated&RepeatedHost != 0:
		return 400
	case !r.HasUpgradeWebsocket || !r.HasConnectionUpgrade:
		return 400
	case len(r.Version) == 0 || r.Repeated&RepeatedVersion != 0:
		// RFC 6455 section 4.2.2 asks for 426 when the version is one the server
		// does not understand; a missing one is a malformed request (as gobwas/ws).
		return 400
	case string(r.Version) != "13":
		return 426
	case !validKey(r.Key) || r.Repeated&RepeatedKey != 0:
		return 400
	}
	return 101
}

// validKey reports whether key is the base64 encoding of 16 bytes
// (RFC 6455 section 4.1, item 7 of the client's requirements).
func validKey(key []byte) bool {
	if len(key) != 24 {
		return false
	}
	var dst [18]byte
	n, err := base64.StdEncoding.Strict().Decode(dst[:], key)
	return err == nil && n == 16
}

// acceptGUID is the RFC 6455 section 1.3 GUID appended to the key.
const acceptGUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

const acceptHead = "HTTP/1.1 101 Switching Protocols\r\n" +
	"Upgrade: websocket\r\n" +
	"Connection: Upgrade\r\n" +
	"Sec-WebSocket-Accept: "

// AppendAccept appends the 101 Switching Protocols response for the client's
// Sec-WebSocket-Key to dst, with Sec-WebSocket-Accept = base64(SHA-1(key + GUID))
// (RFC 6455 section 4.2.2). It offers no subprotocol and no extension, which
// declines any permessage-deflate offer (RFC 7692 section 5.1).
// Safe for concurrent use.
func AppendAccept(dst []byte, key []byte) []byte {
	dst = append(dst, acceptHead...)
	dst = appendAcceptKey(dst, key)
	return append(dst, "\r\n\r\n"...)
}

// appendAcceptKey appends base64(SHA-1(key + GUID)) to dst.
func appendAcceptKey(dst, key []byte) []byte {
	var in [64]byte // a 24-byte key plus the 36-byte GUID fits
	var sum [sha1.Size]byte
	if len(key)+len(acceptGUID) <= len(in) {
		n := copy(in[:], key)
		n += copy(in[n:], acceptGUID)
		sum = sha1.Sum(in[:n])
	} else {
		h := sha1.New()
		h.Write(key)
		h.Write([]byte(acceptGUID))
		h.Sum(sum[:0])
	}
	return base64.StdEncoding.AppendEncode(dst, sum[:])
}

// AppendHTTPError appends a complete HTTP/1.1 error response for status to dst:
// status line, Content-Type text/plain, Content-Length, Connection: close and a
// short body naming the status. A 426 also carries "Upgrade: websocket" (RFC 9110
// section 15.5.22) and "Sec-WebSocket-Version: 13" (RFC 6455 section 4.2.2); a 401
// carries "WWW-Authenticate: Bearer" (RFC 9110 section 15.5.2); a 503
// "Retry-After: 1" (CONTRACT.md section 11.1).
// Safe for concurrent use.
func AppendHTTPError(dst []byte, status int) []byte {
	text := statusText(status)
	dst = append(dst, "HTTP/1.1 "...)
	dst = strconv.AppendInt(dst, int64(status), 10)
	dst = append(dst, ' ')
	dst = append(dst, text...)
	dst = append(dst, "\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: "...)
	dst = strconv.AppendInt(dst, int64(len(text)+1), 10)
	dst = append(dst, "\r\nConnection: close\r\n"...)
	switch status {
	case 426:
		dst = append(dst, "Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\n"...)
	case 401:
		dst = append(dst, "WWW-Authenticate: Bearer\r\n"...)
	case 503:
		dst = append(dst, "Retry-After: 1\r\n"...)
	}
	dst = append(dst, "\r\n"...)
	dst = append(dst, text...)
	return append(dst, '\n')
}

// statusText returns the reason phrase of the statuses the upgrade path answers.
func statusText(status int) string {
	switch status {
	case 400:
		return "Bad Request"
	case 401:
		return "Unauthorized"
	case 403:
		return "Forbidden"
	case 404:
		return "Not Found"
	case 405:
		return "Method Not Allowed"
	case 408:
		return "Request Timeout"
	case 426:
		return "Upgrade Required"
	case 429:
		return "Too Many Requests"
	case 431:
		return "Request Header Fields Too Large"
	case 500:
		return "Internal Server Error"
	case 503:
		return "Service Unavailable"
	}
	return "Error"
}

// trimOWS trims spaces and tabs from both ends of b.
func trimOWS(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}

// hasToken reports whether the comma-separated list v contains token
// (case-insensitive, RFC 9110 section 5.6.1). token must be lower case.
func hasToken(v []byte, token string) bool {
	for len(v) > 0 {
		var item []byte
		if i := bytes.IndexByte(v, ','); i >= 0 {
			item, v = v[:i], v[i+1:]
		} else {
			item, v = v, nil
		}
		if equalFold(trimOWS(item), token) {
			return true
		}
	}
	return false
}

// equalFold reports whether b equals the lower-case ASCII string s, ignoring
// ASCII case, without allocating.
func equalFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(b) {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// isTokenChar reports whether c is a tchar (RFC 9110 section 5.6.2): ASCII
// letters, digits and !#$%&'*+-.^_`|~, as a bit set over the 128 ASCII codes.
func isTokenChar(c byte) bool {
	const (
		lo = 0x03ff6cfa00000000 // codes 0-63
		hi = 0x57ffffffc7fffffe // codes 64-127
	)
	if c < 64 {
		return lo>>c&1 != 0
	}
	return c < 128 && hi>>(c-64)&1 != 0
}
