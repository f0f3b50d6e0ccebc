// Package auth verifies the bearer tokens of WebSocket upgrades (CONTRACT.md
// section 11.3): static tokens from a file and JWTs. It knows no sockets:
// loop asks a Verifier about the token of an upgrade request and keeps the
// Identity it returns with the connection.
package auth

import (
	"errors"
	"time"
)

// Identity is who a connection is, as its token said.
type Identity struct {
	// Subject is the token's subject: a static token's SUBJECT, a JWT's
	// "sub" claim.
	Subject string
	// Expires is when the identity ends (a JWT's "exp" plus the --jwt-leeway,
	// so that the leeway applies to the whole connection, as it did at the
	// upgrade); zero for never.
	Expires time.Time
}

// Verifier checks a token. Implementations must be safe for concurrent use
// and must not block for long: the loop calls Verify during the upgrade.
type Verifier interface {
	// Verify returns the identity of a valid token, or an error saying why
	// it is not valid. The error must not contain the token.
	Verify(token string) (Identity, error)
}

// ErrInvalid is the error of a token no key accepts.
var ErrInvalid = errors.New("auth: invalid token")
