// Package redact gives the display form of text that may carry credentials
// (CONTRACT.md section 12): the userinfo of every URL in it,
// scheme://USER:PASSWORD@host, is shown as USER:***@, and userinfo without a
// password as ***@ (a NATS token is written nats://TOKEN@host). What edge
// prints (edge config, logs, admin bodies, pprof's cmdline) goes through
// URLs; what it dials keeps the URL as given.
package redact

import "strings"

// Mask is what a credential is shown as.
const Mask = "***"

// URLs returns s with the userinfo of every URL in it masked. A URL is found
// by its "://" and ends at white space or a quote, so that a URL inside an
// error message or a %q is found too. Its userinfo ends at the last '@'
// before the first '/', '?' or '#', as net/url reads it; when a password
// holds one of those unescaped (a URL net/url refuses), the authority looks
// like USER:PASSWORD rather than HOST:PORT, and the userinfo runs to the last
// '@' of the URL instead. Text without "://" is returned as is, without
// allocating. Safe for concurrent use.
func URLs(s string) string {
	i := strings.Index(s, "://")
	if i < 0 {
		return s
	}
	var b strings.Builder
	for i >= 0 {
		b.WriteString(s[:i+3])
		s = s[i+3:]
		end := strings.IndexAny(s, " \t\r\n\"'`<>")
		if end < 0 {
			end = len(s)
		}
		run := s[:end]
		auth := run
		if j := strings.IndexAny(run, "/?#"); j >= 0 {
			auth = run[:j]
		}
		at := strings.LastIndexByte(auth, '@')
		if at < 0 && strings.Contains(auth, ":") && !hostPort(auth) {
			at = strings.LastIndexByte(run, '@')
		}
		if at >= 0 {
			b.WriteString(userinfo(run[:at]))
			s = s[at:] // from the '@'
		}
		i = strings.Index(s, "://")
	}
	b.WriteString(s)
	return b.String()
}

// userinfo is the display form of a URL's userinfo: the user with a masked
// password, or the mask alone when there is no password (the user part is
// then the secret: a token).
func userinfo(u string) string {
	if user, _, ok := strings.Cut(u, ":"); ok {
		return user + ":" + Mask
	}
	return Mask
}

// hostPort reports whether a (an authority without '@') reads as HOST:PORT
// with a numeric port, or [IPv6]:PORT.
func hostPort(a string) bool {
	k := strings.LastIndexByte(a, ':')
	port := a[k+1:]
	if port == "" {
		return false
	}
	for _, c := range port {
		if c < '0' || c > '9' {
			return false
		}
	}
	host := a[:k]
	return !strings.Contains(host, ":") || strings.HasPrefix(host, "[")
}

// Args returns argv with URLs applied to each argument: a command line fit
// to show (pprof's cmdline, logs). Safe for concurrent use.
func Args(argv []string) []string {
	out := make([]string, len(argv))
	for i, a := range argv {
		out[i] = URLs(a)
	}
	return out
}
