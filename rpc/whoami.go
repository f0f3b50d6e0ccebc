package rpc

import (
	"time"

	"github.com/openengine/edge/codec"
)

// Peer is implemented by a Sink that knows who its client is, for
// edge/whoami (CONTRACT.md section 11).
type Peer interface {
	// Whoami returns the subject of the connection's identity (ok false
	// when the listener does not authenticate), its expiry (zero for
	// none) and the client's address as IP:PORT.
	Whoami() (subject string, ok bool, expires time.Time, remote string)
}

// whoami answers edge/whoami inline:
// {"subject":S|null,"expiresAt":"RFC3339"|null,"remote":"IP:PORT"}.
func (s *Session) whoami(id []byte) {
	var subject, remote string
	var ok bool
	var expires time.Time
	if p, is := s.sink.(Peer); is {
		subject, ok, expires, remote = p.Whoami()
	}
	b := append(s.buf[:0], `{"subject":`...)
	if ok {
		b = codec.AppendQuote(b, subject)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"expiresAt":`...)
	if expires.IsZero() {
		b = append(b, "null"...)
	} else {
		b = codec.AppendQuote(b, expires.UTC().Format(time.RFC3339))
	}
	b = append(b, `,"remote":`...)
	b = codec.AppendQuote(b, remote)
	b = append(b, '}')
	n := len(b)
	b = codec.AppendResult(b, id, b[:n])
	s.buf = b
	s.send(b[n:])
}
