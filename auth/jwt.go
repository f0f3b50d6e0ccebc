package auth

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// DefaultLeeway is the clock skew allowed on "exp", "nbf" and "iat" when
// JWTConfig.Leeway is zero (CONTRACT.md section 11.3).
const DefaultLeeway = 30 * time.Second

// JWTConfig configures NewJWT. Zero values mean the documented defaults.
type JWTConfig struct {
	// KeyFiles are the --jwt-key files of public keys: each PEM public keys
	// or certificates, or a JWKS document. Nothing in them is ever taken
	// for an HMAC secret.
	KeyFiles []string
	// HMACKeyFiles are the --jwt-hmac-key files: each an HMAC secret, its
	// raw bytes exactly.
	HMACKeyFiles []string
	// Alg is the algorithm of the HMAC secrets: HS256, HS384 or HS512.
	// Required with HMACKeyFiles, refused without them (public keys carry
	// their algorithms).
	Alg string
	// Leeway is the clock skew allowed on exp, nbf and iat: 0 means
	// DefaultLeeway, a negative value none.
	Leeway time.Duration
	// Audience, when set, must be one of the token's "aud".
	Audience string
	// Issuer, when set, must equal the token's "iss".
	Issuer string
	// AllowNoExp accepts tokens without "exp" (their identity never ends).
	AllowNoExp bool
	// Now is the clock; nil means time.Now. For tests.
	Now func() time.Time
}

// jwtVerifier is the Verifier of NewJWT. Immutable after NewJWT.
type jwtVerifier struct {
	keys   []key
	parser *jwt.Parser
	leeway time.Duration // >= 0: added to "exp" for Identity.Expires
	// testHookParse, when set, is called before each token is parsed (and
	// then verified). For tests: nil outside them.
	testHookParse func()
}

// NewJWT loads cfg's key files and returns a Verifier of JWTs signed by
// them (CONTRACT.md section 11.3). A key's kind comes from the field that
// names its file, never from the file's content; a file that is not what
// its field takes is an error naming it, and the error joins every problem
// of every file. A token's "alg" must be one of its key's
// family (RS* and PS* for RSA, the ES* of the curve for ECDSA, EdDSA for
// Ed25519, cfg.Alg for HMAC secrets); "none" is always refused. A token with
// a "kid" that some JWKS key has is checked against those keys only; other
// tokens are checked against every key without a kid (PEM, HMAC, JWKs
// without "kid") of the right family; a "kid" that names no key, when every
// key has one, is ErrUnknownKid. Safe for concurrent use.
func NewJWT(cfg JWTConfig) (Verifier, error) {
	if len(cfg.KeyFiles) == 0 && len(cfg.HMACKeyFiles) == 0 && cfg.Alg == "" {
		return nil, errors.New("auth: jwt: no key file")
	}
	var keys []key
	var errs []error
	for _, path := range cfg.KeyFiles {
		k, err := loadPublicKeyFile(path)
		errs = append(errs, err)
		keys = append(keys, k...)
	}
	if len(cfg.HMACKeyFiles) > 0 {
		if _, ok := hmacMinBytes[cfg.Alg]; !ok {
			errs = append(errs, fmt.Errorf("auth: --jwt-hmac-key needs --jwt-alg HS256, HS384 or HS512 (got %q)", cfg.Alg))
		} else {
			for _, path := range cfg.HMACKeyFiles {
				k, err := loadHMACFile(path, cfg.Alg)
				errs = append(errs, err)
				keys = append(keys, k...)
			}
		}
	} else if cfg.Alg != "" {
		errs = append(errs, errors.New("auth: --jwt-alg is the algorithm of --jwt-hmac-key secrets, and none is given (a --jwt-key public key carries its own)"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	leeway := cfg.Leeway
	switch {
	case leeway == 0:
		leeway = DefaultLeeway
	case leeway < 0:
		leeway = 0
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	opts := []jwt.ParserOption{
		jwt.WithLeeway(leeway),
		jwt.WithTimeFunc(now),
		jwt.WithIssuedAt(),
	}
	if !cfg.AllowNoExp {
		opts = append(opts, jwt.WithExpirationRequired())
	}
	if cfg.Audience != "" {
		opts = append(opts, jwt.WithAudience(cfg.Audience))
	}
	if cfg.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(cfg.Issuer))
	}
	return &jwtVerifier{keys: keys, parser: jwt.NewParser(opts...), leeway: leeway}, nil
}

// maxExpires is the last instant whose UnixNano is representable: the loop
// keeps a connection's expiry in nanoseconds, and an "exp" past it would
// wrap to the past and close the connection 4401 at its first frame.
var maxExpires = time.Unix(0, math.MaxInt64)

// Verify checks a JWT's signature and claims and returns its identity:
// Subject is "sub" (may be empty), Expires is "exp" plus the leeway (zero
// without "exp"). The leeway applies to the whole life of the connection,
// not only to the upgrade: a token accepted at the door because its "exp"
// is within the leeway must not be closed 4401 by its first frame, so the
// identity ends where Verify would start refusing the token. Safe for
// concurrent use.
func (v *jwtVerifier) Verify(token string) (Identity, error) {
	if token == "" {
		return Identity{}, ErrMissing // not parsed, no key tried
	}
	if v.testHookParse != nil {
		v.testHookParse()
	}
	var claims jwt.RegisteredClaims
	_, err := v.parser.ParseWithClaims(token, &claims, v.keyFor)
	if err != nil {
		return Identity{}, reason(err, &claims)
	}
	id := Identity{Subject: claims.Subject}
	if claims.ExpiresAt != nil {
		id.Expires = claims.ExpiresAt.Time.Add(v.leeway)
		if id.Expires.After(maxExpires) {
			return Identity{}, ErrExpOutOfRange
		}
	}
	return id, nil
}

// keyFor is the jwt.Keyfunc: it picks the keys a token may be verified with
// by its "alg" and "kid", refusing "none" and algorithm confusion before any
// signature is checked. Its errors are keyErrors around this package's
// sentinels; the alg it names is one golang-jwt knows, never token text.
func (v *jwtVerifier) keyFor(t *jwt.Token) (any, error) {
	alg := t.Method.Alg()
	if alg == jwt.SigningMethodNone.Alg() {
		return nil, keyError{fmt.Errorf("%w: none", ErrAlgNotAllowed)}
	}
	kid, hasKid := t.Header["kid"].(string)
	hasKid = hasKid && kid != ""
	var set []jwt.VerificationKey
	kidMatched, kidless := false, false
	if hasKid {
		for _, k := range v.keys {
			if k.kid == kid {
				kidMatched = true
				if slices.Contains(k.algs, alg) {
					set = append(set, k.pub)
				}
			}
		}
	}
	if !kidMatched {
		for _, k := range v.keys {
			if k.kid != "" {
				continue
			}
			kidless = true
			if slices.Contains(k.algs, alg) {
				set = append(set, k.pub)
			}
		}
	}
	switch {
	case len(set) > 0:
	case hasKid && !kidMatched && !kidless:
		return nil, keyError{ErrUnknownKid}
	case !hasKid && !kidless:
		// Every key is a JWKS key chosen by kid, and the token names none.
		return nil, keyError{fmt.Errorf("%w (the token has none)", ErrUnknownKid)}
	default:
		return nil, keyError{fmt.Errorf("%w: %s", ErrAlgNotAllowed, alg)}
	}
	if len(set) == 1 {
		return set[0], nil
	}
	return jwt.VerificationKeySet{Keys: set}, nil
}

// reason maps golang-jwt's error to this package's sentinels. The result
// never wraps golang-jwt's error: its text may quote decoded token bytes.
func reason(err error, c *jwt.RegisteredClaims) error {
	var ke keyError
	if errors.As(err, &ke) {
		return ke.err
	}
	switch {
	case errors.Is(err, jwt.ErrTokenMalformed):
		return ErrMalformed
	case errors.Is(err, jwt.ErrTokenUnverifiable):
		// "alg" missing or not an algorithm golang-jwt knows.
		return ErrAlgNotAllowed
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		return ErrSignature
	case errors.Is(err, jwt.ErrTokenExpired):
		return ErrExpired
	case errors.Is(err, jwt.ErrTokenRequiredClaimMissing) && c.ExpiresAt == nil:
		return ErrNoExp
	case errors.Is(err, jwt.ErrTokenNotValidYet):
		return ErrNotYetValid
	case errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
		return ErrIssuedInFuture
	case errors.Is(err, jwt.ErrTokenInvalidAudience),
		errors.Is(err, jwt.ErrTokenRequiredClaimMissing) && len(c.Audience) == 0:
		return ErrAudience
	case errors.Is(err, jwt.ErrTokenInvalidIssuer),
		errors.Is(err, jwt.ErrTokenRequiredClaimMissing) && c.Issuer == "":
		return ErrIssuer
	}
	return ErrClaims
}

// keyError carries keyFor's reason through golang-jwt's wrapping.
type keyError struct{ err error }

func (e keyError) Error() string { return e.err.Error() }
func (e keyError) Unwrap() error { return e.err }
