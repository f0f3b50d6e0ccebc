package main

// Credentials never printed (CONTRACT.md section 12): the userinfo of the
// URLs of --upstream and --nats is masked (redact.URLs) wherever edge prints
// them. The packages that print a URL (upstream, topics, admin's pprof
// cmdline) mask it themselves; what is here catches what they cannot:
// a library's error quoting a URL as given (nats.go's, net/http's), in a log
// line or in the error edge exits with.

import (
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/openengine/edge/internal/redact"
)

// newLogger returns edge's logger: text on w from level up, with the userinfo
// of URLs in every attribute masked.
func newLogger(w io.Writer, level slog.Level) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level, ReplaceAttr: maskAttr}))
}

// maskAttr masks the userinfo of URLs in a string, error or Stringer
// attribute. A value without "://" is left alone, unformatted where it can be.
func maskAttr(_ []string, a slog.Attr) slog.Attr {
	var s string
	switch a.Value.Kind() {
	case slog.KindString:
		s = a.Value.String()
	case slog.KindAny:
		switch x := a.Value.Any().(type) {
		case error:
			s = x.Error()
		case fmt.Stringer:
			s = x.String()
		default:
			return a
		}
	default:
		return a
	}
	if strings.Contains(s, "://") {
		a.Value = slog.StringValue(redact.URLs(s))
	}
	return a
}

// maskedError is an error whose message has the userinfo of its URLs
// masked; errors.Is and errors.As see the error it wraps.
type maskedError struct{ err error }

func (e maskedError) Error() string { return redact.URLs(e.err.Error()) }
func (e maskedError) Unwrap() error { return e.err }

// masked wraps err, if any, so that its message shows no URL credentials.
func masked(err error) error {
	if err == nil {
		return nil
	}
	return maskedError{err}
}
