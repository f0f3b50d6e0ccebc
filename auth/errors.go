package auth

import "fmt"

// Why a token is refused. Each wraps ErrInvalid, so errors.Is(err,
// ErrInvalid) holds for every one of them; none contains the token.
var (
	// ErrMissing is the error of an empty token.
	ErrMissing = fmt.Errorf("%w: no token", ErrInvalid)
	// ErrUnknownToken is the error of a token that matches no static token.
	ErrUnknownToken = fmt.Errorf("%w: no static token matches", ErrInvalid)
	// ErrMalformed is the error of a token that is not a well-formed JWT.
	ErrMalformed = fmt.Errorf("%w: malformed JWT", ErrInvalid)
	// ErrAlgNotAllowed is the error of a JWT whose "alg" is "none", unknown,
	// or not the algorithm of any configured key (algorithm confusion).
	ErrAlgNotAllowed = fmt.Errorf("%w: algorithm not allowed", ErrInvalid)
	// ErrUnknownKid is the error of a JWT whose "kid" names no JWKS key.
	ErrUnknownKid = fmt.Errorf("%w: unknown kid", ErrInvalid)
	// ErrSignature is the error of a JWT whose signature no key accepts.
	ErrSignature = fmt.Errorf("%w: bad signature", ErrInvalid)
	// ErrExpired is the error of a JWT past its "exp" (plus the leeway).
	ErrExpired = fmt.Errorf("%w: expired", ErrInvalid)
	// ErrNotYetValid is the error of a JWT before its "nbf" (less the leeway).
	ErrNotYetValid = fmt.Errorf("%w: not yet valid (nbf)", ErrInvalid)
	// ErrIssuedInFuture is the error of a JWT whose "iat" is in the future
	// beyond the leeway.
	ErrIssuedInFuture = fmt.Errorf("%w: issued in the future (iat)", ErrInvalid)
	// ErrExpOutOfRange is the error of a JWT whose "exp" (plus the leeway)
	// lies past what a time in nanoseconds since 1970 holds (year 2262):
	// the connection's expiry could not be kept.
	ErrExpOutOfRange = fmt.Errorf("%w: exp out of range", ErrInvalid)
	// ErrNoExp is the error of a JWT without "exp" when one is required.
	ErrNoExp = fmt.Errorf("%w: no exp claim", ErrInvalid)
	// ErrAudience is the error of a JWT whose "aud" lacks the configured
	// audience.
	ErrAudience = fmt.Errorf("%w: wrong audience", ErrInvalid)
	// ErrIssuer is the error of a JWT whose "iss" is not the configured
	// issuer.
	ErrIssuer = fmt.Errorf("%w: wrong issuer", ErrInvalid)
	// ErrClaims is the error of a JWT whose claims are otherwise invalid.
	ErrClaims = fmt.Errorf("%w: invalid claims", ErrInvalid)
)
