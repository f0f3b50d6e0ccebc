package auth

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"os"
)

// staticTokens is the Verifier of a static tokens file. Immutable after
// LoadTokens.
type staticTokens struct {
	subjects []string
	// sums holds the SHA-256 of each token: comparing fixed-size digests in
	// constant time leaks neither which entry matched nor any token's length.
	sums [][sha256.Size]byte
}

// LoadTokens reads a static tokens file (CONTRACT.md section 11.3): one
// "SUBJECT TOKEN" per line, separated by spaces or tabs; blank lines and
// lines starting with '#' are ignored. A malformed line, or a token given
// twice, is an error naming the line number, never the token. The
// returned Verifier compares a token in constant time against every entry;
// its identities never expire. Safe for concurrent use.
func LoadTokens(path string) (Verifier, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("auth: tokens file: %w", err)
	}
	st := &staticTokens{}
	seen := make(map[[sha256.Size]byte]int)
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	line := 0
	for sc.Scan() {
		line++
		text := bytes.TrimSpace(sc.Bytes())
		if len(text) == 0 || text[0] == '#' {
			continue
		}
		fields := bytes.Fields(text)
		if len(fields) != 2 {
			return nil, fmt.Errorf("auth: tokens file %s line %d: want \"SUBJECT TOKEN\", got %d fields", path, line, len(fields))
		}
		sum := sha256.Sum256(fields[1])
		if prev, ok := seen[sum]; ok {
			return nil, fmt.Errorf("auth: tokens file %s line %d: same token as line %d", path, line, prev)
		}
		seen[sum] = line
		st.subjects = append(st.subjects, string(fields[0]))
		st.sums = append(st.sums, sum)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("auth: tokens file %s line %d: %w", path, line+1, err)
	}
	return st, nil
}

// Verify returns the identity of a static token. It compares the token's
// digest with every entry, whatever matched before. Safe for concurrent use.
func (st *staticTokens) Verify(token string) (Identity, error) {
	if token == "" {
		return Identity{}, ErrMissing
	}
	sum := sha256.Sum256([]byte(token))
	found := -1
	for i := range st.sums {
		eq := subtle.ConstantTimeCompare(sum[:], st.sums[i][:])
		found = subtle.ConstantTimeSelect(eq, i, found)
	}
	if found < 0 {
		return Identity{}, ErrUnknownToken
	}
	return Identity{Subject: st.subjects[found]}, nil
}
