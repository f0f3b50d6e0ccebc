package auth

import (
	"crypto/elliptic"
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

func TestReloadTokens(t *testing.T) {
	path := writeFile(t, t.TempDir(), "tokens", []byte("alice tok-old\n"))
	r, err := NewReloadable(func() (Verifier, error) { return LoadTokens(path) })
	if err != nil {
		t.Fatal(err)
	}
	mustSub(t, r, "tok-old", "alice")

	// A bad file keeps the old tokens.
	writeFile(t, pathDir(path), "tokens", []byte("alice tok-new extra\n"))
	if err := r.Reload(); err == nil {
		t.Fatal("bad file reloaded")
	}
	mustSub(t, r, "tok-old", "alice")
	// So does a missing one.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := r.Reload(); err == nil {
		t.Fatal("missing file reloaded")
	}
	mustSub(t, r, "tok-old", "alice")

	// A good file switches.
	writeFile(t, pathDir(path), "tokens", []byte("bob tok-new\n"))
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	mustSub(t, r, "tok-new", "bob")
	if _, err := r.Verify("tok-old"); !errors.Is(err, ErrUnknownToken) {
		t.Fatalf("old token after reload: %v", err)
	}
}

func TestReloadJWTKeys(t *testing.T) {
	dir := t.TempDir()
	keyA, keyB := genRSA(t), genEC(t, elliptic.P256())
	path := writeFile(t, dir, "key.pem", pemPublic(t, keyA.Public()))
	cfg := JWTConfig{KeyFiles: []string{path}, Now: clock}
	r, err := NewReloadable(func() (Verifier, error) { return NewJWT(cfg) })
	if err != nil {
		t.Fatal(err)
	}
	tokA := sign(t, jwt.SigningMethodRS256, keyA, "", claims(nil))
	tokB := sign(t, jwt.SigningMethodES256, keyB, "", claims(nil))
	mustSub(t, r, tokA, "alice")

	writeFile(t, dir, "key.pem", []byte("-----BEGIN PUBLIC KEY-----\ntruncated"))
	if err := r.Reload(); err == nil {
		t.Fatal("bad key file reloaded")
	}
	mustSub(t, r, tokA, "alice")

	writeFile(t, dir, "key.pem", pemPublic(t, keyB.Public()))
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	mustSub(t, r, tokB, "alice")
	if _, err := r.Verify(tokA); !errors.Is(err, ErrAlgNotAllowed) {
		t.Fatalf("old key's token after reload: %v", err)
	}
}

// TestReloadJWTKeyKinds: a reload reads --jwt-key and --jwt-hmac-key
// files as their flags say, like the first load: a public key file replaced
// by the same key as DER, or an HMAC secret replaced by a short one or one
// ending in a line break, fails the reload and the previous keys stay; a
// good new secret replaces the old one.
func TestReloadJWTKeyKinds(t *testing.T) {
	dir := t.TempDir()
	rsaKey := genRSA(t)
	oldSecret := []byte("the-first-hmac-secret-of-32-byte")
	newSecret := []byte("the-second-hmac-secret-32-bytes!")
	pubPath := writeFile(t, dir, "key.pem", pemPublic(t, rsaKey.Public()))
	secretPath := writeFile(t, dir, "secret", oldSecret)
	cfg := JWTConfig{KeyFiles: []string{pubPath}, HMACKeyFiles: []string{secretPath}, Alg: "HS256", Now: clock}
	r, err := NewReloadable(func() (Verifier, error) { return NewJWT(cfg) })
	if err != nil {
		t.Fatal(err)
	}
	rs := sign(t, jwt.SigningMethodRS256, rsaKey, "", claims(nil))
	hsOld := sign(t, jwt.SigningMethodHS256, oldSecret, "", claims(nil))
	hsNew := sign(t, jwt.SigningMethodHS256, newSecret, "", claims(nil))
	der, err := x509.MarshalPKIXPublicKey(rsaKey.Public())
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []struct {
		name, path string
		data       []byte
		want       string
	}{
		{"public key as DER", pubPath, der, "--jwt-key " + pubPath + ": looks like DER"},
		{"short secret", secretPath, newSecret[:31], "--jwt-hmac-key " + secretPath + ": 31 bytes"},
		{"secret and a line break", secretPath, append(slices.Clone(newSecret), '\n'), "--jwt-hmac-key " + secretPath + ": a text secret"},
		{"public key as an HMAC secret", secretPath, pemPublic(t, rsaKey.Public()), "--jwt-hmac-key " + secretPath + ": contains a PEM block"},
	} {
		prev, err := os.ReadFile(bad.path)
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, dir, filepath.Base(bad.path), bad.data)
		if err := r.Reload(); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Fatalf("%s: reload error %v, want %q", bad.name, err, bad.want)
		}
		mustSub(t, r, rs, "alice")
		mustSub(t, r, hsOld, "alice")
		if _, err := r.Verify(hsNew); err == nil {
			t.Fatalf("%s: a failed reload let the new secret in", bad.name)
		}
		writeFile(t, dir, filepath.Base(bad.path), prev)
	}
	writeFile(t, dir, "secret", newSecret)
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	mustSub(t, r, hsNew, "alice")
	mustSub(t, r, rs, "alice")
	if _, err := r.Verify(hsOld); !errors.Is(err, ErrSignature) {
		t.Fatalf("old secret's token after reload: %v", err)
	}
}

// TestReloadConcurrent verifies while reloading between two key files; the
// race detector checks the swap and every Verify sees one whole verifier.
func TestReloadConcurrent(t *testing.T) {
	dir := t.TempDir()
	path := writeFile(t, dir, "tokens", []byte("alice tok-a\nbob tok-b\n"))
	r, err := NewReloadable(func() (Verifier, error) { return LoadTokens(path) })
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				if id, err := r.Verify("tok-a"); err != nil || id.Subject != "alice" {
					t.Errorf("tok-a: %+v %v", id, err)
					return
				}
			}
		}()
	}
	for i := range 50 {
		content := "alice tok-a\nbob tok-b\n"
		if i%2 == 1 {
			content = "alice tok-a\n"
		}
		writeFile(t, dir, "tokens.tmp", []byte(content))
		if err := os.Rename(dir+"/tokens.tmp", path); err != nil {
			t.Fatal(err)
		}
		if err := r.Reload(); err != nil {
			t.Fatal(err)
		}
	}
	close(done)
	watchdog := time.AfterFunc(time.Minute, func() { panic("TestReloadConcurrent hung") })
	wg.Wait()
	watchdog.Stop()
}

func TestChain(t *testing.T) {
	dir := t.TempDir()
	secret := []byte("chain-secret-of-32-bytes-for-HS2")
	tokens, err := NewReloadable(func() (Verifier, error) {
		return LoadTokens(writeFile(t, dir, "tokens", []byte("svc static-token-1\n")))
	})
	if err != nil {
		t.Fatal(err)
	}
	jwts, err := NewJWT(JWTConfig{HMACKeyFiles: []string{writeFile(t, dir, "hmac", secret)}, Alg: "HS256", Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	c := Chain{tokens, jwts}
	mustSub(t, c, "static-token-1", "svc")
	mustSub(t, c, sign(t, jwt.SigningMethodHS256, secret, "", claims(nil)), "alice")
	for _, tt := range []struct {
		name  string
		token string
		want  error
	}{
		{"wrong static", "static-token-2", ErrUnknownToken},
		{"expired jwt says expired", sign(t, jwt.SigningMethodHS256, secret, "", claims(func(c jwt.MapClaims) { c["exp"] = now.Add(-time.Hour).Unix() })), ErrExpired},
		{"alg none says so", unsigned(`{"alg":"none"}`, `{"sub":"x","exp":9999999999}`), ErrAlgNotAllowed},
		{"empty", "", ErrMissing},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.Verify(tt.token)
			checkNoToken(t, err, tt.token)
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
		})
	}
	if err := c.Reload(); err != nil {
		t.Fatal(err)
	}
	if _, err := (Chain{}).Verify("x"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("empty chain: %v", err)
	}
}

func mustSub(t *testing.T, v Verifier, token, sub string) {
	t.Helper()
	id, err := v.Verify(token)
	if err != nil || id.Subject != sub {
		t.Fatalf("verify: %+v %v, want subject %q", id, err, sub)
	}
}

func pathDir(p string) string { return filepath.Dir(p) }

// countingVerifier counts the tokens it is asked about and accepts none.
type countingVerifier struct{ calls atomic.Int64 }

func (c *countingVerifier) Verify(string) (Identity, error) {
	c.calls.Add(1)
	return Identity{}, ErrUnknownToken
}

// TestNoTokenNoVerification is issue 20 item 5: an upgrade that carries no
// token must cost no JWT parse and no RSA or EC verification. The loop asks
// the Chain that cmd/edge builds about the empty token: the Chain answers
// ErrMissing without asking any member (it asked every member before), and
// a JWT verifier asked directly parses nothing; a token, even a bad one, is
// parsed once, which shows the counting works.
func TestNoTokenNoVerification(t *testing.T) {
	dir := t.TempDir()
	rsaKey := genRSA(t)
	v, err := NewJWT(JWTConfig{KeyFiles: []string{writeFile(t, dir, "rsa.pem", pemPublic(t, rsaKey.Public()))}, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	var parses atomic.Int64
	v.(*jwtVerifier).testHookParse = func() { parses.Add(1) }
	members := [2]countingVerifier{}
	c := Chain{&members[0], v, &members[1]}

	_, chainErr := c.Verify("")
	_, jwtErr := v.Verify("")
	if n0, n1, p := members[0].calls.Load(), members[1].calls.Load(), parses.Load(); n0+n1+p != 0 {
		t.Fatalf("no token: the chain asked its members %d and %d times, the JWT verifier parsed %d tokens; want none", n0, n1, p)
	}
	if !errors.Is(chainErr, ErrMissing) || !errors.Is(jwtErr, ErrMissing) {
		t.Fatalf("no token: chain %v, JWT verifier %v, want ErrMissing", chainErr, jwtErr)
	}

	mustSub(t, c, sign(t, jwt.SigningMethodRS256, rsaKey, "", claims(nil)), "alice")
	if _, err := c.Verify(sign(t, jwt.SigningMethodRS256, genRSA(t), "", claims(nil))); !errors.Is(err, ErrSignature) {
		t.Fatalf("another key's token: %v", err)
	}
	if n0, p := members[0].calls.Load(), parses.Load(); n0 != 2 || p != 2 {
		t.Fatalf("two tokens: the first member asked %d times, %d parsed; want 2 and 2", n0, p)
	}
}

// TestReloadTokensEmptyKeepsPrevious: a SIGHUP that reads the tokens file
// while it is rewritten in place (truncated, not yet written) keeps the
// previous tokens; before, it loaded the empty set and every client got 401.
func TestReloadTokensEmptyKeepsPrevious(t *testing.T) {
	path := writeFile(t, t.TempDir(), "tokens", []byte("alice tok-a\n"))
	r, err := NewReloadable(func() (Verifier, error) { return LoadTokens(path) })
	if err != nil {
		t.Fatal(err)
	}
	for _, content := range []string{"", "# being rewritten\n", "\n\n"} {
		writeFile(t, pathDir(path), "tokens", []byte(content))
		if err := r.Reload(); !errors.Is(err, ErrReloadEmpty) {
			t.Fatalf("reload of %q: %v, want ErrReloadEmpty", content, err)
		}
		mustSub(t, r, "tok-a", "alice")
	}
	writeFile(t, pathDir(path), "tokens", []byte("bob tok-b\n"))
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	mustSub(t, r, "tok-b", "bob")
}
