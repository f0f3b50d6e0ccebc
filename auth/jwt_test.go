package auth

import (
	"crypto/elliptic"
	"encoding/base64"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// now is the fixed clock of the JWT tests (JWTConfig.Now): no real sleeps.
var now = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func clock() time.Time { return now }

const (
	testAud = "edge"
	testIss = "https://issuer.example"
)

// claims are valid claims for the test clock, audience and issuer.
func claims(mod func(c jwt.MapClaims)) jwt.MapClaims {
	c := jwt.MapClaims{
		"sub": "alice",
		"aud": testAud,
		"iss": testIss,
		"iat": now.Add(-time.Minute).Unix(),
		"exp": now.Add(time.Hour).Unix(),
	}
	if mod != nil {
		mod(c)
	}
	return c
}

// sign signs claims with golang-jwt; kid, when set, goes in the header.
func sign(t *testing.T, m jwt.SigningMethod, key any, kid string, c jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(m, c)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// unsigned crafts an "alg: none" token by hand: header, payload, empty
// signature.
func unsigned(header, payload string) string {
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(header)) + "." + enc([]byte(payload)) + "."
}

// checkNoToken fails when an error's text holds the token or any of its
// segments.
func checkNoToken(t *testing.T, err error, token string) {
	t.Helper()
	if err == nil || token == "" {
		return
	}
	msg := err.Error()
	if strings.Contains(msg, token) {
		t.Fatalf("error %q contains the token", msg)
	}
	for _, seg := range strings.Split(token, ".") {
		if len(seg) >= 8 && strings.Contains(msg, seg) {
			t.Fatalf("error %q contains a token segment", msg)
		}
	}
}

// TestJWTMatrix is every row of issue 12's handshake matrix that concerns
// JWTs, plus the edges around them (leeway, families, kid selection).
func TestJWTMatrix(t *testing.T) {
	dir := t.TempDir()
	secret := []byte("a-32-byte-hmac-secret-for-tests!")
	secret2 := []byte("another-hmac-secret-for-the-test")
	rsaKey, otherRSA := genRSA(t), genRSA(t)
	ecKey, ec384 := genEC(t, elliptic.P256()), genEC(t, elliptic.P384())
	edKey := genEd(t)
	rsaPEM := pemPublic(t, rsaKey.Public())

	hmacFile := writeFile(t, dir, "hmac", secret)
	hmac2File := writeFile(t, dir, "hmac2", secret2)
	rsaFile := writeFile(t, dir, "rsa.pem", rsaPEM)
	ecFile := writeFile(t, dir, "ec.pem", pemPublic(t, ecKey.Public()))
	edFile := writeFile(t, dir, "ed.pem", pemPublic(t, edKey.Public()))
	jwksFile := writeFile(t, dir, "jwks.json", jwks(t,
		jwkOf(t, "r1", rsaKey.Public()),
		jwkOf(t, "e1", ec384.Public()),
		jwkOf(t, "o1", edKey.Public())))

	mk := func(cfg JWTConfig) Verifier {
		t.Helper()
		cfg.Now = clock
		v, err := NewJWT(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	all := mk(JWTConfig{KeyFiles: []string{rsaFile, ecFile, edFile}, HMACKeyFiles: []string{hmacFile, hmac2File},
		Alg: "HS256", Audience: testAud, Issuer: testIss})
	noExp := mk(JWTConfig{HMACKeyFiles: []string{hmacFile}, Alg: "HS256", AllowNoExp: true})
	noAudIss := mk(JWTConfig{HMACKeyFiles: []string{hmacFile}, Alg: "HS256"})
	rsaOnly := mk(JWTConfig{KeyFiles: []string{rsaFile}})
	set := mk(JWTConfig{KeyFiles: []string{jwksFile}, Audience: testAud})
	noLeeway := mk(JWTConfig{HMACKeyFiles: []string{hmacFile}, Alg: "HS256", Leeway: -1})

	hs := func(mod func(jwt.MapClaims)) string { return sign(t, jwt.SigningMethodHS256, secret, "", claims(mod)) }
	valid := hs(nil)
	parts := strings.Split(valid, ".")
	tampered := parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(`{"sub":"mallory","exp":9999999999}`)) + "." + parts[2]

	tests := []struct {
		name    string
		v       Verifier
		token   string
		want    error // nil: accepted
		sub     string
		expires time.Time
	}{
		// Valid tokens, one per family.
		{name: "valid HS256", v: all, token: valid, sub: "alice", expires: now.Add(time.Hour + DefaultLeeway)},
		{name: "valid HS256 second secret", v: all, token: sign(t, jwt.SigningMethodHS256, secret2, "", claims(nil)), sub: "alice"},
		{name: "valid RS256", v: all, token: sign(t, jwt.SigningMethodRS256, rsaKey, "", claims(nil)), sub: "alice", expires: now.Add(time.Hour + DefaultLeeway)},
		{name: "valid RS512", v: all, token: sign(t, jwt.SigningMethodRS512, rsaKey, "", claims(nil)), sub: "alice"},
		{name: "valid PS256", v: all, token: sign(t, jwt.SigningMethodPS256, rsaKey, "", claims(nil)), sub: "alice"},
		{name: "valid ES256", v: all, token: sign(t, jwt.SigningMethodES256, ecKey, "", claims(nil)), sub: "alice"},
		{name: "valid EdDSA", v: all, token: sign(t, jwt.SigningMethodEdDSA, edKey, "", claims(nil)), sub: "alice"},
		{name: "empty sub", v: all, token: hs(func(c jwt.MapClaims) { delete(c, "sub") }), sub: ""},
		{name: "aud list containing ours", v: all, token: hs(func(c jwt.MapClaims) { c["aud"] = []string{"other", testAud} }), sub: "alice"},

		// Time claims.
		{name: "expired", v: all, token: hs(func(c jwt.MapClaims) { c["exp"] = now.Add(-time.Minute).Unix() }), want: ErrExpired},
		{name: "expired within leeway", v: all, token: hs(func(c jwt.MapClaims) { c["exp"] = now.Add(-10 * time.Second).Unix() }),
			sub: "alice", expires: now.Add(-10*time.Second + DefaultLeeway)},
		{name: "expired within default leeway, leeway off", v: noLeeway, token: hs(func(c jwt.MapClaims) { c["exp"] = now.Add(-10 * time.Second).Unix() }), want: ErrExpired},
		{name: "exp exactly now", v: noLeeway, token: hs(func(c jwt.MapClaims) { c["exp"] = now.Unix() }), want: ErrExpired},
		{name: "nbf in the future", v: all, token: hs(func(c jwt.MapClaims) { c["nbf"] = now.Add(5 * time.Minute).Unix() }), want: ErrNotYetValid},
		{name: "nbf within leeway", v: all, token: hs(func(c jwt.MapClaims) { c["nbf"] = now.Add(20 * time.Second).Unix() }), sub: "alice"},
		{name: "iat in the future beyond leeway", v: all, token: hs(func(c jwt.MapClaims) { c["iat"] = now.Add(5 * time.Minute).Unix() }), want: ErrIssuedInFuture},
		{name: "iat within leeway", v: all, token: hs(func(c jwt.MapClaims) { c["iat"] = now.Add(20 * time.Second).Unix() }), sub: "alice"},
		{name: "missing exp", v: all, token: hs(func(c jwt.MapClaims) { delete(c, "exp") }), want: ErrNoExp},
		{name: "missing exp allowed", v: noExp, token: hs(func(c jwt.MapClaims) { delete(c, "exp") }), sub: "alice"},
		{name: "exp not a number", v: all, token: hs(func(c jwt.MapClaims) { c["exp"] = "tomorrow" }), want: ErrMalformed},

		// Audience and issuer.
		{name: "wrong aud", v: all, token: hs(func(c jwt.MapClaims) { c["aud"] = "someone-else" }), want: ErrAudience},
		{name: "missing aud", v: all, token: hs(func(c jwt.MapClaims) { delete(c, "aud") }), want: ErrAudience},
		{name: "wrong iss", v: all, token: hs(func(c jwt.MapClaims) { c["iss"] = "https://evil.example" }), want: ErrIssuer},
		{name: "missing iss", v: all, token: hs(func(c jwt.MapClaims) { delete(c, "iss") }), want: ErrIssuer},
		{name: "aud and iss unchecked when unset", v: noAudIss, token: hs(func(c jwt.MapClaims) { c["aud"] = "x"; c["iss"] = "y" }), sub: "alice"},

		// Algorithms.
		{name: "alg none", v: all, token: unsigned(`{"alg":"none","typ":"JWT"}`, `{"sub":"mallory","exp":9999999999,"aud":"edge","iss":"https://issuer.example"}`), want: ErrAlgNotAllowed},
		{name: "alg none, no exp required", v: noExp, token: unsigned(`{"alg":"none"}`, `{"sub":"mallory"}`), want: ErrAlgNotAllowed},
		{name: "alg None spelled otherwise", v: noExp, token: unsigned(`{"alg":"None"}`, `{"sub":"mallory"}`), want: ErrAlgNotAllowed},
		{name: "no alg", v: noExp, token: unsigned(`{"typ":"JWT"}`, `{"sub":"mallory"}`), want: ErrAlgNotAllowed},
		{name: "HS256 signed with the RSA PEM against the RSA key (confusion)", v: rsaOnly,
			token: sign(t, jwt.SigningMethodHS256, rsaPEM, "", claims(nil)), want: ErrAlgNotAllowed},
		{name: "HS384 against an HS256 secret", v: all, token: sign(t, jwt.SigningMethodHS384, secret, "", claims(nil)), want: ErrAlgNotAllowed},
		{name: "ES384 against a P-256 key", v: all, token: sign(t, jwt.SigningMethodES384, ec384, "", claims(nil)), want: ErrAlgNotAllowed},
		{name: "RS256 by another key", v: all, token: sign(t, jwt.SigningMethodRS256, otherRSA, "", claims(nil)), want: ErrSignature},
		{name: "HS256 by another secret", v: all, token: sign(t, jwt.SigningMethodHS256, []byte("wrong"), "", claims(nil)), want: ErrSignature},
		{name: "tampered payload", v: all, token: tampered, want: ErrSignature},

		// JWKS.
		{name: "jwks right kid RS256", v: set, token: sign(t, jwt.SigningMethodRS256, rsaKey, "r1", claims(nil)), sub: "alice"},
		{name: "jwks right kid ES384", v: set, token: sign(t, jwt.SigningMethodES384, ec384, "e1", claims(nil)), sub: "alice"},
		{name: "jwks right kid EdDSA", v: set, token: sign(t, jwt.SigningMethodEdDSA, edKey, "o1", claims(nil)), sub: "alice"},
		{name: "jwks unknown kid", v: set, token: sign(t, jwt.SigningMethodRS256, rsaKey, "nope", claims(nil)), want: ErrUnknownKid},
		{name: "jwks no kid", v: set, token: sign(t, jwt.SigningMethodRS256, rsaKey, "", claims(nil)), want: ErrUnknownKid},
		{name: "jwks kid of another family", v: set, token: sign(t, jwt.SigningMethodEdDSA, edKey, "r1", claims(nil)), want: ErrAlgNotAllowed},
		{name: "jwks kid of another key", v: set, token: sign(t, jwt.SigningMethodRS256, otherRSA, "r1", claims(nil)), want: ErrSignature},
		{name: "kid ignored by PEM keys", v: all, token: sign(t, jwt.SigningMethodEdDSA, edKey, "whatever", claims(nil)), sub: "alice"},

		// Not JWTs.
		{name: "garbage", v: all, token: "garbage-token-text", want: ErrMalformed},
		{name: "three garbage segments", v: all, token: "abc!.def.ghi", want: ErrMalformed},
		{name: "json header garbage", v: all, token: unsigned(`{"alg":`, `{}`), want: ErrMalformed},
		{name: "empty", v: all, token: "", want: ErrMissing},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id, err := tt.v.Verify(tt.token)
			checkNoToken(t, err, tt.token)
			if tt.want != nil {
				if !errors.Is(err, tt.want) || !errors.Is(err, ErrInvalid) {
					t.Fatalf("err = %v, want %v", err, tt.want)
				}
				if id != (Identity{}) {
					t.Fatalf("identity %+v with an error", id)
				}
				return
			}
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			if id.Subject != tt.sub {
				t.Fatalf("subject %q, want %q", id.Subject, tt.sub)
			}
			if !tt.expires.IsZero() && !id.Expires.Equal(tt.expires) {
				t.Fatalf("expires %v, want %v", id.Expires, tt.expires)
			}
		})
	}

	t.Run("no exp gives a zero expiry", func(t *testing.T) {
		id, err := noExp.Verify(hs(func(c jwt.MapClaims) { delete(c, "exp") }))
		if err != nil || !id.Expires.IsZero() {
			t.Fatalf("id %+v err %v", id, err)
		}
	})
}

// TestJWTDefaultLeeway checks that a zero Leeway is DefaultLeeway, moving
// the clock rather than sleeping.
func TestJWTDefaultLeeway(t *testing.T) {
	dir := t.TempDir()
	secret := []byte("a-32-byte-hmac-secret-for-tests!")
	at := now
	v, err := NewJWT(JWTConfig{HMACKeyFiles: []string{writeFile(t, dir, "k", secret)}, Alg: "HS256", Now: func() time.Time { return at }})
	if err != nil {
		t.Fatal(err)
	}
	tok := sign(t, jwt.SigningMethodHS256, secret, "", jwt.MapClaims{"sub": "s", "exp": now.Unix()})
	for _, tt := range []struct {
		at time.Time
		ok bool
	}{
		{now.Add(-time.Second), true},
		{now.Add(DefaultLeeway - time.Second), true},
		{now.Add(DefaultLeeway), false},
	} {
		at = tt.at
		_, err := v.Verify(tok)
		if (err == nil) != tt.ok {
			t.Fatalf("at exp%+v: err %v, want ok=%v", tt.at.Sub(now), err, tt.ok)
		}
	}
}

// TestJWTExpiresWithLeeway: Identity.Expires is "exp" plus the leeway, the
// moment from which Verify refuses the token, so a token accepted at the
// upgrade within its leeway is not closed 4401 by its first frame. For
// each leeway, the token is accepted at exactly the instants before
// Expires (the loop closes at now >= Expires).
func TestJWTExpiresWithLeeway(t *testing.T) {
	dir := t.TempDir()
	secret := []byte("a-32-byte-hmac-secret-for-tests!")
	file := writeFile(t, dir, "k", secret)
	tok := sign(t, jwt.SigningMethodHS256, secret, "", jwt.MapClaims{"sub": "s", "exp": now.Unix()})
	for _, tt := range []struct {
		leeway, want time.Duration // want: Expires - exp
	}{{0, DefaultLeeway}, {5 * time.Second, 5 * time.Second}, {-1, 0}} {
		at := now.Add(-time.Minute)
		v, err := NewJWT(JWTConfig{HMACKeyFiles: []string{file}, Alg: "HS256", Leeway: tt.leeway, Now: func() time.Time { return at }})
		if err != nil {
			t.Fatal(err)
		}
		id, err := v.Verify(tok)
		if err != nil {
			t.Fatalf("leeway %v: %v", tt.leeway, err)
		}
		if got := id.Expires.Sub(now); got != tt.want {
			t.Fatalf("leeway %v: Expires is exp%+v, want exp%+v", tt.leeway, got, tt.want)
		}
		for _, d := range []time.Duration{-time.Second, 0, time.Second} {
			at = id.Expires.Add(d)
			_, err := v.Verify(tok)
			if accepted, alive := err == nil, at.Before(id.Expires); accepted != alive {
				t.Fatalf("leeway %v, at Expires%+v: accepted %v but identity alive %v", tt.leeway, d, accepted, alive)
			}
		}
	}
}

// TestJWTExpPastYear2262: an "exp" whose instant has no UnixNano is refused
// at the upgrade; before, it was accepted and its expiry, wrapped into the
// past by the loop's nanoseconds, closed the connection 4401 at its first
// frame. The last representable instant itself is accepted.
func TestJWTExpPastYear2262(t *testing.T) {
	secret := []byte("a-32-byte-hmac-secret-for-tests!")
	file := writeFile(t, t.TempDir(), "k", secret)
	v, err := NewJWT(JWTConfig{HMACKeyFiles: []string{file}, Alg: "HS256", Leeway: -1, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	last := time.Unix(0, math.MaxInt64).Unix() // seconds: at or before the last nanosecond
	for _, tt := range []struct {
		exp  int64
		want error
	}{
		{last, nil},
		{last + 1, ErrExpOutOfRange},
		{time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC).Unix(), ErrExpOutOfRange},
		{1 << 50, ErrExpOutOfRange},
	} {
		id, err := v.Verify(sign(t, jwt.SigningMethodHS256, secret, "", jwt.MapClaims{"sub": "s", "exp": tt.exp}))
		if !errors.Is(err, tt.want) {
			t.Fatalf("exp %d: %v, want %v", tt.exp, err, tt.want)
		}
		if err == nil && id.Expires.UnixNano() < now.UnixNano() {
			t.Fatalf("exp %d: Expires %v wraps to %d ns", tt.exp, id.Expires, id.Expires.UnixNano())
		}
	}
}
