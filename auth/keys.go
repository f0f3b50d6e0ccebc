package auth

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"encoding/asn1"
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

// The kind of a key comes from the flag that names its file, never from the
// file's content (issue 20): a public key file that the content test took
// for something else used to become an HMAC secret, whose bytes are public,
// so anyone could sign a token with them.

// loadPublicKeyFile reads one --jwt-key file: PEM public keys or
// certificates, or a JWKS document of public keys. Anything else (DER, a
// broken JSON document, raw bytes, a private or symmetric key) is an error
// saying what the file looks like; it never becomes an HMAC secret.
func loadPublicKeyFile(path string) ([]key, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("auth: --jwt-key: %w", err)
	}
	keys, err := parsePublic(data)
	if err != nil {
		return nil, fmt.Errorf("auth: --jwt-key %s: %w", path, err)
	}
	return keys, nil
}

// parsePublic tells the two public key formats apart: a file whose first
// non-space byte is '{' is a JWKS document, one with "-----BEGIN" is PEM.
// Its errors quote no byte of the file: it may be a secret given to the
// wrong flag.
func parsePublic(data []byte) ([]key, error) {
	t := bytes.TrimSpace(data)
	switch {
	case len(t) == 0:
		return nil, errors.New("empty file: want a PEM public key or a JWKS document")
	case t[0] == '{' || t[0] == '[':
		if err := jsonSyntax(data); err != nil {
			return nil, err
		}
		if t[0] == '[' {
			return nil, errors.New(`a JSON array: want a JWKS document, {"keys":[...]}`)
		}
		return parseJWKS(data)
	case bytes.Contains(data, []byte("-----BEGIN")):
		return parsePEM(data)
	}
	if what, ok := derKind(data); ok {
		return nil, fmt.Errorf("looks like DER (%s), not PEM: convert it, e.g. openssl pkey -pubin -inform DER -in FILE -out FILE.pem", what)
	}
	return nil, errors.New("no PEM block and not a JSON document: --jwt-key takes a PEM public key (RS*, PS*, ES*, EdDSA) or a JWKS document; a shared HMAC secret goes in --jwt-hmac-key")
}

// jsonSyntax reports where data stops being JSON, by byte offset and line,
// without quoting it.
func jsonSyntax(data []byte) error {
	var v json.RawMessage
	err := json.Unmarshal(data, &v)
	var se *json.SyntaxError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &se):
		line := 1 + bytes.Count(data[:min(int(se.Offset), len(data))], []byte{'\n'})
		return fmt.Errorf("invalid JSON at offset %d (line %d)", se.Offset, line)
	}
	return errors.New("invalid JSON")
}

// derKind reports whether data is one DER-encoded ASN.1 SEQUENCE whose
// contents are whole ASN.1 elements, and names what it holds when x509
// parses it.
func derKind(data []byte) (string, bool) {
	var seq asn1.RawValue
	rest, err := asn1.Unmarshal(data, &seq)
	if err != nil || len(rest) != 0 || seq.Class != asn1.ClassUniversal || seq.Tag != asn1.TagSequence || !seq.IsCompound {
		return "", false
	}
	for in := seq.Bytes; len(in) > 0; {
		var el asn1.RawValue
		if in, err = asn1.Unmarshal(in, &el); err != nil {
			return "", false
		}
	}
	if _, err := x509.ParsePKIXPublicKey(data); err == nil {
		return "a public key", true
	}
	if _, err := x509.ParsePKCS1PublicKey(data); err == nil {
		return "an RSA public key", true
	}
	if _, err := x509.ParseCertificate(data); err == nil {
		return "a certificate", true
	}
	if _, err := x509.ParsePKCS8PrivateKey(data); err == nil {
		return "a private key", true
	}
	return "an ASN.1 SEQUENCE", true
}

// loadHMACFile reads one --jwt-hmac-key file: the secret is the file's
// bytes, exactly. A file that parses as JSON, PEM or DER is a key document
// given to the wrong flag and is refused, so is a secret shorter than the
// hash of alg (RFC 7518 section 3.2), and so is a text secret ending in a
// line break (see hmacSecret).
func loadHMACFile(path, alg string) ([]key, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("auth: --jwt-hmac-key: %w", err)
	}
	if err := hmacSecret(data, alg); err != nil {
		return nil, fmt.Errorf("auth: --jwt-hmac-key %s: %w", path, err)
	}
	return []key{{algs: []string{alg}, pub: bytes.Clone(data)}}, nil
}

// hmacMinBytes is the least secret size of each HMAC algorithm: the size of
// its hash (RFC 7518 section 3.2).
var hmacMinBytes = map[string]int{"HS256": 32, "HS384": 48, "HS512": 64}

// hmacSecret checks an HMAC secret for alg. Its errors quote no byte of it.
//
// Nothing is stripped: the secret is the file's bytes, as the signer must
// have them. A text secret (printable ASCII) followed by a line break is
// refused rather than guessed at: `openssl rand -base64 32 > FILE` writes
// one, and whether the signer's copy has it decides whether every token
// verifies; refusing turns that silent mismatch into a start-up error. A
// binary secret is used whatever its last byte.
func hmacSecret(data []byte, alg string) error {
	switch {
	case len(data) == 0:
		return errors.New("empty file")
	case bytes.Contains(data, []byte("-----BEGIN")):
		return errors.New("contains a PEM block: an HMAC secret is raw bytes; a public key goes in --jwt-key")
	case json.Valid(data):
		return errors.New("parses as JSON: an HMAC secret is raw bytes (of a JWK of kty oct, its base64url-decoded k); a JWKS of public keys goes in --jwt-key")
	}
	if what, ok := derKind(data); ok {
		return fmt.Errorf("parses as DER (%s): an HMAC secret is raw bytes; a public key goes in --jwt-key, as PEM", what)
	}
	if body, ok := textLine(data); ok {
		return fmt.Errorf("a text secret of %d bytes followed by a line break: the secret is the file's bytes, exactly; write it without the line break (printf %%s \"$SECRET\" > FILE)", len(body))
	}
	if need := hmacMinBytes[alg]; len(data) < need {
		return fmt.Errorf("%d bytes: %s needs a secret of at least %d bytes (RFC 7518 section 3.2)", len(data), alg, need)
	}
	return nil
}

// textLine reports whether data is printable ASCII followed by one line
// break ("\n" or "\r\n"), and returns the text.
func textLine(data []byte) ([]byte, bool) {
	body, ok := bytes.CutSuffix(data, []byte("\n"))
	if !ok {
		return nil, false
	}
	body, _ = bytes.CutSuffix(body, []byte("\r"))
	for _, c := range body {
		if c < 0x20 || c > 0x7e {
			return nil, false
		}
	}
	return body, true
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
	// D is the private part of an RSA, EC or OKP key: read only to refuse
	// a private key.
	D string `json:"d"`
}

// parseJWKS reads a JWK Set of public keys. A symmetric key ("kty": "oct")
// or a private one (with "d") is an error, whatever its "use": --jwt-key is
// the flag of public keys, and a set that holds a secret is the wrong file.
// Keys of other types (unknown curves, unknown kty) and encryption keys
// ("use": "enc") are skipped; a set with no usable key is an error, and so
// is a malformed key of a supported type. A JWK's "alg", when given,
// narrows the key to that one algorithm.
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
		switch {
		case j.Kty == "oct":
			return nil, fmt.Errorf(`JWKS key %d: kty "oct" is a symmetric (HMAC) key: --jwt-key takes public keys only (an HMAC secret goes in --jwt-hmac-key, as raw bytes)`, i)
		case j.D != "":
			return nil, fmt.Errorf(`JWKS key %d: a private key (it has "d"): --jwt-key takes public keys only`, i)
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
