package auth

import (
	"bytes"
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
	"fmt"
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

// TestKeyFileErrors: a --jwt-key file that is not PEM public keys or a
// JWKS document of public keys is refused, naming the file and saying what
// it looks like; no error quotes the file (it may be a secret given to the
// wrong flag).
func TestKeyFileErrors(t *testing.T) {
	dir := t.TempDir()
	rsaKey := genRSA(t)
	privDER, err := x509.MarshalPKCS8PrivateKey(rsaKey)
	if err != nil {
		t.Fatal(err)
	}
	pubDER, err := x509.MarshalPKIXPublicKey(rsaKey.Public())
	if err != nil {
		t.Fatal(err)
	}
	cert := &x509.Certificate{SerialNumber: big.NewInt(1)}
	certDER, err := x509.CreateCertificate(rand.Reader, cert, cert, rsaKey.Public(), rsaKey)
	if err != nil {
		t.Fatal(err)
	}
	edPub := base64.RawURLEncoding.EncodeToString(genEd(t).Public().(ed25519.PublicKey))
	const secret = "hmac-SECRET-never-in-errors"
	strayComma := []byte(`{"keys":[{"kty":"OKP","crv":"Ed25519","x":"` + edPub + `"},]}`)
	tests := []struct {
		name string
		data []byte
		want string
	}{
		{"raw bytes", []byte(secret), "no PEM block and not a JSON document"},
		{"base64 secret with a line break", []byte(base64.StdEncoding.EncodeToString([]byte(secret)) + "\n"), "no PEM block"},
		{"empty file", nil, "empty file"},
		{"DER public key", pubDER, "looks like DER (a public key)"},
		{"DER certificate", certDER, "looks like DER (a certificate)"},
		{"DER private key", privDER, "looks like DER (a private key)"},
		{"private key PEM", pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: privDER}), "not a public key"},
		{"broken PEM block", []byte("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n"), "PEM block 1"},
		{"PEM marker without block", []byte("-----BEGIN nothing"), "no PEM block"},
		// The offset counts the byte that broke the document: the ']'.
		{"JWKS with a stray comma", strayComma, fmt.Sprintf("invalid JSON at offset %d (line 1)", bytes.Index(strayComma, []byte(",]"))+2)},
		{"JSON broken on line 3", []byte("{\n\"keys\": [\n" + secret + "]}"), "invalid JSON at offset 13 (line 3)"},
		{"brace then secret bytes", []byte("{" + secret), "invalid JSON at offset"},
		{"JSON array", []byte(`[{"kty":"OKP"}]`), "a JSON array"},
		{"JSON without keys", []byte(`{"kty":"RSA","n":"AQAB","e":"AQAB"}`), `without "keys"`},
		{"JWKS of an oct key", []byte(`{"keys":[{"kty":"oct","k":"` + base64.RawURLEncoding.EncodeToString([]byte(secret)) + `"}]}`), `kty "oct" is a symmetric (HMAC) key`},
		{"JWKS of an oct key for encryption", []byte(`{"keys":[{"kty":"oct","use":"enc","k":"c2VjcmV0"}]}`), `kty "oct"`},
		{"JWKS with an oct key beside a public one", jwks(t, jwkOf(t, "o", genEd(t).Public()), map[string]string{"kty": "oct", "k": "c2VjcmV0"}), `JWKS key 1: kty "oct"`},
		{"JWKS of a private key", []byte(`{"keys":[{"kty":"OKP","crv":"Ed25519","x":"` + edPub + `","d":"` + edPub + `"}]}`), "a private key"},
		{"JWKS bad base64", []byte(`{"keys":[{"kty":"OKP","crv":"Ed25519","x":"!!"}]}`), "base64url"},
		{"JWKS EC off curve", []byte(`{"keys":[{"kty":"EC","crv":"P-256","x":"` + strings.Repeat("A", 43) + `","y":"` + strings.Repeat("A", 43) + `"}]}`), "P-256"},
		{"JWKS alg of another family", jwks(t, map[string]string{"kty": "OKP", "crv": "Ed25519", "alg": "HS256", "x": edPub}), "does not fit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := writeFile(t, dir, "key", tt.data)
			_, err := NewJWT(JWTConfig{KeyFiles: []string{p}})
			if err == nil {
				t.Fatal("loaded")
			}
			if !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "--jwt-key "+p+": ") {
				t.Fatalf("error %q: want %q and the flag and path", err, tt.want)
			}
			if strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "jwt-alg") {
				t.Fatalf("error %q contains the secret or advises --jwt-alg", err)
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

// TestHMACKeyFileErrors: a --jwt-hmac-key file is refused when it parses
// as JSON, PEM or DER (a key document given to the wrong flag), when it is
// shorter than the hash (RFC 7518 section 3.2), when it is text ending in a
// line break, and without --jwt-alg; --jwt-alg without an HMAC secret is
// refused too. Every error names the file or the flag, none quotes the
// secret, and all the problems are reported at once.
func TestHMACKeyFileErrors(t *testing.T) {
	dir := t.TempDir()
	rsaKey := genRSA(t)
	pubDER, err := x509.MarshalPKIXPublicKey(rsaKey.Public())
	if err != nil {
		t.Fatal(err)
	}
	const secret = "hmac-SECRET-never-in-errors-0123456789-abcdefghijklmnopqrstuvwxyz" // 65 bytes
	tests := []struct {
		name string
		data []byte
		alg  string
		want string
	}{
		{"JWKS", jwks(t, jwkOf(t, "k", rsaKey.Public())), "HS256", "parses as JSON"},
		{"JWK of kty oct", []byte(`{"kty":"oct","k":"` + base64.RawURLEncoding.EncodeToString([]byte(secret)) + `"}`), "HS256", "parses as JSON"},
		{"JSON string", []byte(`"` + secret + `"`), "HS256", "parses as JSON"},
		{"PEM public key", pemPublic(t, rsaKey.Public()), "HS256", "contains a PEM block"},
		{"DER public key", pubDER, "HS256", "parses as DER (a public key)"},
		{"DER of an unknown SEQUENCE", append([]byte{0x30, 34, 0x04, 32}, make([]byte, 32)...), "HS256", "parses as DER (an ASN.1 SEQUENCE)"},
		{"empty", nil, "HS256", "empty file"},
		{"31 bytes for HS256", []byte(secret[:31]), "HS256", "31 bytes: HS256 needs a secret of at least 32 bytes"},
		{"47 bytes for HS384", []byte(secret[:47]), "HS384", "47 bytes: HS384 needs a secret of at least 48 bytes"},
		{"63 bytes for HS512", []byte(secret[:63]), "HS512", "63 bytes: HS512 needs a secret of at least 64 bytes"},
		{"text and a line break", []byte(secret + "\n"), "HS256", "a text secret of 65 bytes followed by a line break"},
		{"text and CRLF", []byte(secret + "\r\n"), "HS256", "a text secret of 65 bytes followed by a line break"},
		{"no --jwt-alg", []byte(secret), "", "--jwt-hmac-key needs --jwt-alg"},
		{"an RSA algorithm", []byte(secret), "RS256", `--jwt-hmac-key needs --jwt-alg HS256, HS384 or HS512 (got "RS256")`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := writeFile(t, dir, "secret", tt.data)
			_, err := NewJWT(JWTConfig{HMACKeyFiles: []string{p}, Alg: tt.alg})
			if err == nil {
				t.Fatal("loaded")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %q: want %q", err, tt.want)
			}
			if tt.alg != "" && !strings.Contains(tt.want, "jwt-alg") && !strings.Contains(err.Error(), "--jwt-hmac-key "+p+": ") {
				t.Fatalf("error %q: want the flag and the path", err)
			}
			if strings.Contains(err.Error(), secret[:20]) {
				t.Fatalf("error %q contains the secret", err)
			}
		})
	}
	t.Run("--jwt-alg without a secret", func(t *testing.T) {
		_, err := NewJWT(JWTConfig{KeyFiles: []string{writeFile(t, dir, "pub.pem", pemPublic(t, rsaKey.Public()))}, Alg: "HS256"})
		if err == nil || !strings.Contains(err.Error(), "--jwt-alg is the algorithm of --jwt-hmac-key secrets") {
			t.Fatalf("error %v", err)
		}
	})
	t.Run("every problem at once", func(t *testing.T) {
		der := writeFile(t, dir, "der", pubDER)
		short := writeFile(t, dir, "short", []byte(secret[:10]))
		_, err := NewJWT(JWTConfig{KeyFiles: []string{der}, HMACKeyFiles: []string{short, der}, Alg: "HS512"})
		for _, want := range []string{"--jwt-key " + der + ": looks like DER", "--jwt-hmac-key " + short + ": 10 bytes", "--jwt-hmac-key " + der + ": parses as DER"} {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("error %v: want %q", err, want)
			}
		}
	})
}

func TestKeyFileKinds(t *testing.T) {
	dir := t.TempDir()
	rsaKey := genRSA(t)
	cert := &x509.Certificate{SerialNumber: big.NewInt(1)}
	certDER, err := x509.CreateCertificate(rand.Reader, cert, cert, rsaKey.Public(), rsaKey)
	if err != nil {
		t.Fatal(err)
	}
	binary := make([]byte, 64)
	for i := range binary {
		binary[i] = byte(i * 7)
	}
	binary[63] = '\n' // a binary secret may end in a line feed byte
	tests := []struct {
		name string
		data []byte
		hmac string   // the algorithm: an --jwt-hmac-key file
		want []string // algs of the first key
		kid  string
	}{
		{"hmac of 32 bytes", []byte(strings.Repeat("s", 32)), "HS256", []string{"HS256"}, ""},
		{"hmac starting with a brace", []byte("{not json" + strings.Repeat("x", 39)), "HS384", []string{"HS384"}, ""},
		{"binary hmac ending in a line feed", binary, "HS512", []string{"HS512"}, ""},
		{"rsa pkix", pemPublic(t, rsaKey.Public()), "", rsaAlgs, ""},
		{"rsa pkcs1", pem.EncodeToMemory(&pem.Block{Type: "RSA PUBLIC KEY", Bytes: x509.MarshalPKCS1PublicKey(&rsaKey.PublicKey)}), "", rsaAlgs, ""},
		{"certificate", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: certDER}), "", rsaAlgs, ""},
		{"ec p256", pemPublic(t, genEC(t, elliptic.P256()).Public()), "", []string{"ES256"}, ""},
		{"ec p384", pemPublic(t, genEC(t, elliptic.P384()).Public()), "", []string{"ES384"}, ""},
		{"ec p521", pemPublic(t, genEC(t, elliptic.P521()).Public()), "", []string{"ES512"}, ""},
		{"ed25519", pemPublic(t, genEd(t).Public()), "", []string{"EdDSA"}, ""},
		{"jwks ec p521", jwks(t, jwkOf(t, "k", genEC(t, elliptic.P521()).Public())), "", []string{"ES512"}, "k"},
		{"jwks with leading space", append([]byte("\n  "), jwks(t, jwkOf(t, "k", genEd(t).Public()))...), "", []string{"EdDSA"}, "k"},
		{"jwks alg narrows", jwks(t, map[string]string{"kty": "RSA", "kid": "r", "alg": "PS384",
			"n": base64.RawURLEncoding.EncodeToString(rsaKey.N.Bytes()), "e": "AQAB"}), "", []string{"PS384"}, "r"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := writeFile(t, dir, "key", tt.data)
			var keys []key
			var err error
			if tt.hmac != "" {
				keys, err = loadHMACFile(p, tt.hmac)
			} else {
				keys, err = loadPublicKeyFile(p)
			}
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(keys[0].algs, ",") != strings.Join(tt.want, ",") || keys[0].kid != tt.kid {
				t.Fatalf("got algs %v kid %q, want %v %q", keys[0].algs, keys[0].kid, tt.want, tt.kid)
			}
			if tt.hmac != "" && !bytes.Equal(keys[0].pub.([]byte), tt.data) {
				t.Fatal("the HMAC secret is not the file's bytes")
			}
		})
	}
}
