package auth

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"slices"
)

// key is one verification key with the JWS algorithms it may verify.
// Immutable after loading.
type key struct {
	// kid is the JWK's "kid"; "" for PEM and HMAC keys and for JWKs
	// without one. A key with a kid is chosen only by a token naming it.
	kid  string
	algs []string
	// pub is []byte (HMAC), *rsa.PublicKey, *ecdsa.PublicKey or
	// ed25519.PublicKey: what golang-jwt's signing methods verify with.
	pub any
}

var (
	hmacAlgs  = []string{"HS256", "HS384", "HS512"}
	rsaAlgs   = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512"}
	eddsaAlgs = []string{"EdDSA"}
)

// ecAlgs returns the one ES algorithm of a curve (RFC 7518 section 3.4).
func ecAlgs(c elliptic.Curve) ([]string, bool) {
	switch c {
	case elliptic.P256():
		return []string{"ES256"}, true
	case elliptic.P384():
		return []string{"ES384"}, true
	case elliptic.P521():
		return []string{"ES512"}, true
	}
	return nil, false
}

// loadKeyFile reads one --jwt-key file and tells its kind by content: a JSON
// object with "keys" is a JWKS document, a file with "-----BEGIN" is PEM,
// anything else is an HMAC secret (its raw bytes) used with hmacAlg.
func loadKeyFile(path, hmacAlg string) ([]key, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("auth: jwt key: %w", err)
	}
	var keys []key
	switch {
	case isJSONObject(data):
		keys, err = parseJWKS(data)
	case bytes.Contains(data, []byte("-----BEGIN")):
		keys, err = parsePEM(data)
	default:
		keys, err = hmacKey(data, hmacAlg)
	}
	if err != nil {
		return nil, fmt.Errorf("auth: jwt key %s: %w", path, err)
	}
	return keys, nil
}

// isJSONObject reports whether data is a valid JSON object. Random secret
// bytes that merely start with '{' are not.
func isJSONObject(data []byte) bool {
	t := bytes.TrimSpace(data)
	return len(t) > 0 && t[0] == '{' && json.Valid(t)
}

func hmacKey(secret []byte, alg string) ([]key, error) {
	if len(secret) == 0 {
		return nil, errors.New("empty HMAC secret")
	}
	if alg == "" {
		return nil, errors.New("an HMAC secret needs the algorithm (HS256, HS384 or HS512)")
	}
	if !slices.Contains(hmacAlgs, alg) {
		return nil, fmt.Errorf("HMAC algorithm %q is not HS256, HS384 or HS512", alg)
	}
	return []key{{algs: []string{alg}, pub: bytes.Clone(secret)}}, nil
}

// parsePEM reads every PEM block of a file: public keys (PKIX "PUBLIC KEY",
// PKCS #1 "RSA PUBLIC KEY") and certificates. Private keys are refused: the
// gateway only verifies.
func parsePEM(data []byte) ([]key, error) {
	var keys []key
	for n := 1; ; n++ {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			break
		}
		var pub any
		var err error
		switch block.Type {
		case "PUBLIC KEY":
			pub, err = x509.ParsePKIXPublicKey(block.Bytes)
		case "RSA PUBLIC KEY":
			pub, err = x509.ParsePKCS1PublicKey(block.Bytes)
		case "CERTIFICATE":
			var cert *x509.Certificate
			if cert, err = x509.ParseCertificate(block.Bytes); err == nil {
				pub = cert.PublicKey
			}
		default:
			return nil, fmt.Errorf("PEM block %d: type %q is not a public key or certificate", n, block.Type)
		}
		if err != nil {
			return nil, fmt.Errorf("PEM block %d: %w", n, err)
		}
		k, err := publicKey(pub)
		if err != nil {
			return nil, fmt.Errorf("PEM block %d: %w", n, err)
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, errors.New("no PEM block")
	}
	return keys, nil
}

// publicKey gives a parsed public key the algorithms of its family.
func publicKey(pub any) (key, error) {
	switch p := pub.(type) {
	case *rsa.PublicKey:
		return key{algs: rsaAlgs, pub: p}, nil
	case *ecdsa.PublicKey:
		algs, ok := ecAlgs(p.Curve)
		if !ok {
			return key{}, errors.New("unsupported ECDSA curve")
		}
		return key{algs: algs, pub: p}, nil
	case ed25519.PublicKey:
		return key{algs: eddsaAlgs, pub: p}, nil
	}
	return key{}, fmt.Errorf("unsupported public key type %T", pub)
}

// jwk is the part of a JSON Web Key (RFC 7517, RFC 7518 section 6, RFC 8037)
// the gateway reads.
type jwk struct {
	Kty string `json:"kty"`
	Kid string `json:"kid"`
	Alg string `json:"alg"`
	Use string `json:"use"`
	N   string `json:"n"`
	E   string `json:"e"`
	Crv string `json:"crv"`
	X   string `json:"x"`
	Y   string `json:"y"`
}

// parseJWKS reads a JWK Set. Keys of other types (oct, unknown curves) and
// encryption keys ("use": "enc") are skipped; a set with no usable key is an
// error, and so is a malformed key of a supported type. A JWK's "alg", when
// given, narrows the key to that one algorithm.
func parseJWKS(data []byte) ([]key, error) {
	var set struct {
		Keys *[]json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(data, &set); err != nil {
		return nil, fmt.Errorf("JWKS: %w", err)
	}
	if set.Keys == nil {
		return nil, errors.New(`a JSON object without "keys" (a single JWK must be wrapped: {"keys":[...]})`)
	}
	var keys []key
	for i, raw := range *set.Keys {
		var j jwk
		if err := json.Unmarshal(raw, &j); err != nil {
			return nil, fmt.Errorf("JWKS key %d: %w", i, err)
		}
		if j.Use != "" && j.Use != "sig" {
			continue
		}
		k, ok, err := j.key()
		if err != nil {
			return nil, fmt.Errorf("JWKS key %d: %w", i, err)
		}
		if !ok {
			continue
		}
		k.kid = j.Kid
		if j.Alg != "" {
			if !slices.Contains(k.algs, j.Alg) {
				return nil, fmt.Errorf("JWKS key %d: alg %q does not fit kty %q", i, j.Alg, j.Kty)
			}
			k.algs = []string{j.Alg}
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, errors.New("JWKS has no usable signature key (RSA, EC P-256/384/521, OKP Ed25519)")
	}
	return keys, nil
}

// key builds the public key of a JWK; ok is false for a key type the
// gateway does not verify with.
func (j *jwk) key() (k key, ok bool, err error) {
	switch j.Kty {
	case "RSA":
		n, err := b64(j.N, "n")
		if err != nil {
			return key{}, false, err
		}
		e, err := b64(j.E, "e")
		if err != nil {
			return key{}, false, err
		}
		if len(e) > 4 {
			return key{}, false, errors.New("RSA exponent too large")
		}
		pub := &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(new(big.Int).SetBytes(e).Int64())}
		if pub.E < 3 || pub.E%2 == 0 || pub.N.BitLen() < 1024 {
			return key{}, false, errors.New("RSA key too small or exponent invalid")
		}
		return key{algs: rsaAlgs, pub: pub}, true, nil
	case "EC":
		var curve elliptic.Curve
		switch j.Crv {
		case "P-256":
			curve = elliptic.P256()
		case "P-384":
			curve = elliptic.P384()
		case "P-521":
			curve = elliptic.P521()
		default:
			return key{}, false, nil
		}
		size := (curve.Params().BitSize + 7) / 8
		x, err := b64(j.X, "x")
		if err != nil {
			return key{}, false, err
		}
		y, err := b64(j.Y, "y")
		if err != nil {
			return key{}, false, err
		}
		if len(x) != size || len(y) != size {
			return key{}, false, fmt.Errorf("EC %s coordinates must be %d bytes", j.Crv, size)
		}
		point := append(append([]byte{4}, x...), y...)
		pub, err := ecdsa.ParseUncompressedPublicKey(curve, point)
		if err != nil {
			return key{}, false, fmt.Errorf("EC %s: %w", j.Crv, err)
		}
		algs, _ := ecAlgs(curve)
		return key{algs: algs, pub: pub}, true, nil
	case "OKP":
		if j.Crv != "Ed25519" {
			return key{}, false, nil
		}
		x, err := b64(j.X, "x")
		if err != nil {
			return key{}, false, err
		}
		if len(x) != ed25519.PublicKeySize {
			return key{}, false, fmt.Errorf("Ed25519 x must be %d bytes", ed25519.PublicKeySize)
		}
		return key{algs: eddsaAlgs, pub: ed25519.PublicKey(x)}, true, nil
	}
	return key{}, false, nil
}

// b64 decodes a JWK member: base64url without padding (RFC 7515 section 2).
func b64(s, name string) ([]byte, error) {
	if s == "" {
		return nil, fmt.Errorf("missing %q", name)
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("%q is not base64url: %w", name, err)
	}
	return b, nil
}
