package auth

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Test helpers: keys generated per test run, written as PEM and JWKS files.

func genRSA(t *testing.T) *rsa.PrivateKey {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func genEC(t *testing.T, c elliptic.Curve) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(c, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func genEd(t *testing.T) ed25519.PrivateKey {
	t.Helper()
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// pemPublic is the PKIX PEM encoding of a public key.
func pemPublic(t *testing.T, pub crypto.PublicKey) []byte {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

func writeFile(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// jwkOf is the JWK of a public key with a kid (RFC 7517, RFC 8037).
func jwkOf(t *testing.T, kid string, pub crypto.PublicKey) map[string]string {
	t.Helper()
	enc := base64.RawURLEncoding.EncodeToString
	switch p := pub.(type) {
	case *rsa.PublicKey:
		return map[string]string{"kty": "RSA", "kid": kid, "n": enc(p.N.Bytes()), "e": enc(big.NewInt(int64(p.E)).Bytes())}
	case *ecdsa.PublicKey:
		size := (p.Curve.Params().BitSize + 7) / 8
		point, err := p.Bytes()
		if err != nil {
			t.Fatal(err)
		}
		return map[string]string{"kty": "EC", "kid": kid, "crv": p.Curve.Params().Name,
			"x": enc(point[1 : 1+size]), "y": enc(point[1+size:])}
	case ed25519.PublicKey:
		return map[string]string{"kty": "OKP", "kid": kid, "crv": "Ed25519", "x": enc(p)}
	}
	t.Fatalf("jwkOf: %T", pub)
	return nil
}

func jwks(t *testing.T, keys ...map[string]string) []byte {
	t.Helper()
	b, err := json.Marshal(map[string]any{"keys": keys})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestKeyFileErrors(t *testing.T) {
	dir := t.TempDir()
	rsaKey := genRSA(t)
	privDER, err := x509.MarshalPKCS8PrivateKey(rsaKey)
	if err != nil {
		t.Fatal(err)
	}
	const secret = "hmac-SECRET-never-in-errors"
	tests := []struct {
		name string
		data []byte
		alg  string
		want string
	}{
		{"hmac without alg", []byte(secret), "", "needs the algorithm"},
		{"hmac with RS256", []byte(secret), "RS256", "is not HS256"},
		{"empty file", nil, "HS256", "empty HMAC secret"},
		{"private key PEM", pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: privDER}), "", "not a public key"},
		{"broken PEM block", []byte("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n"), "", "PEM block 1"},
		{"PEM marker without block", []byte("-----BEGIN nothing"), "", "no PEM block"},
		{"JSON without keys", []byte(`{"kty":"RSA","n":"AQAB","e":"AQAB"}`), "", `without "keys"`},
		{"JWKS of oct keys only", []byte(`{"keys":[{"kty":"oct","k":"c2VjcmV0"}]}`), "", "no usable"},
		{"JWKS bad base64", []byte(`{"keys":[{"kty":"OKP","crv":"Ed25519","x":"!!"}]}`), "", "base64url"},
		{"JWKS EC off curve", []byte(`{"keys":[{"kty":"EC","crv":"P-256","x":"` + strings.Repeat("A", 43) + `","y":"` + strings.Repeat("A", 43) + `"}]}`), "", "P-256"},
		{"JWKS alg of another family", jwks(t, map[string]string{"kty": "OKP", "crv": "Ed25519", "alg": "HS256", "x": base64.RawURLEncoding.EncodeToString(genEd(t).Public().(ed25519.PublicKey))}), "", "does not fit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := writeFile(t, dir, "key", tt.data)
			_, err := NewJWT(JWTConfig{KeyFiles: []string{p}, Alg: tt.alg})
			if err == nil {
				t.Fatal("loaded")
			}
			if !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), p) {
				t.Fatalf("error %q: want %q and the path", err, tt.want)
			}
			if strings.Contains(err.Error(), secret) {
				t.Fatalf("error %q contains the secret", err)
			}
		})
	}
	if _, err := NewJWT(JWTConfig{}); err == nil {
		t.Fatal("no key file: loaded")
	}
	if _, err := NewJWT(JWTConfig{KeyFiles: []string{filepath.Join(dir, "missing")}}); err == nil {
		t.Fatal("missing file: loaded")
	}
}

func TestKeyFileKinds(t *testing.T) {
	dir := t.TempDir()
	rsaKey := genRSA(t)
	cert := &x509.Certificate{SerialNumber: big.NewInt(1)}
	certDER, err := x509.CreateCertificate(rand.Reader, cert, cert, rsaKey.Public(), rsaKey)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		data []byte
		alg  string
		want []string // algs of the first key
		kid  string
	}{
		{"hmac", []byte("secret"), "HS384", []string{"HS384"}, ""},
		{"hmac starting with a brace", []byte("{not json"), "HS512", []string{"HS512"}, ""},
		{"rsa pkix", pemPublic(t, rsaKey.Public()), "", rsaAlgs, ""},
		{"rsa pkcs1", pem.EncodeToMemory(&pem.Block{Type: "RSA PUBLIC KEY", Bytes: x509.MarshalPKCS1PublicKey(&rsaKey.PublicKey)}), "", rsaAlgs, ""},
		{"certificate", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: certDER}), "", rsaAlgs, ""},
		{"ec p256", pemPublic(t, genEC(t, elliptic.P256()).Public()), "", []string{"ES256"}, ""},
		{"ec p384", pemPublic(t, genEC(t, elliptic.P384()).Public()), "", []string{"ES384"}, ""},
		{"ec p521", pemPublic(t, genEC(t, elliptic.P521()).Public()), "", []string{"ES512"}, ""},
		{"ed25519", pemPublic(t, genEd(t).Public()), "", []string{"EdDSA"}, ""},
		{"jwks ec p521", jwks(t, jwkOf(t, "k", genEC(t, elliptic.P521()).Public())), "", []string{"ES512"}, "k"},
		{"jwks alg narrows", jwks(t, map[string]string{"kty": "RSA", "kid": "r", "alg": "PS384",
			"n": base64.RawURLEncoding.EncodeToString(rsaKey.N.Bytes()), "e": "AQAB"}), "", []string{"PS384"}, "r"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			keys, err := loadKeyFile(writeFile(t, dir, "key", tt.data), tt.alg)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(keys[0].algs, ",") != strings.Join(tt.want, ",") || keys[0].kid != tt.kid {
				t.Fatalf("got algs %v kid %q, want %v %q", keys[0].algs, keys[0].kid, tt.want, tt.kid)
			}
		})
	}
}
