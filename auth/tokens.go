package auth

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"fmt"
	"os"
)

// staticTokens is the Verifier of a static tokens file. Immutable after
// LoadTokens.
//
// A lookup costs the same for 10 tokens or 10,000 (issue 20 item 5): the
// token's SHA-256 digest picks its entry through a map, and the whole
// digest is then compared in constant time. The map is keyed by the
// digest's first 8 bytes, so what its lookup's timing can tell is whether
// some listed token's digest starts like the digest of the guess, which
// says nothing about any token (finding a token by its digest's prefix is
// a preimage search); comparing fixed-size digests leaks no token's length.
type staticTokens struct {
	// index maps the first 8 bytes of a token's digest to the first of its
	// entries (a chain through tokenEntry.next, almost always one long).
	index   map[uint64]int32
	entries []tokenEntry
}

// tokenEntry is one line of a tokens file.
type tokenEntry struct {
	sum     [sha256.Size]byte // the token's SHA-256
	subject string
	next    int32 // the next entry whose digest starts the same, -1 for none
}

// digestKey is the index key of a digest: its first 8 bytes.
func digestKey(sum *[sha256.Size]byte) uint64 { return binary.LittleEndian.Uint64(sum[:8]) }

// LoadTokens reads a static tokens file (CONTRACT.md section 11.3): one
// "SUBJECT TOKEN" per line, separated by spaces or tabs; blank lines and
// lines starting with '#' are ignored. A malformed line, or a token given
// twice, is an error naming the line number, never the token. The
// returned Verifier finds a token by its SHA-256 digest at a cost that
// does not grow with the file, and compares digests in constant time; its
// identities never expire. Safe for concurrent use.
func LoadTokens(path string) (Verifier, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("auth: tokens file: %w", err)
	}
	st := &staticTokens{index: make(map[uint64]int32)}
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
		st.add(sum, string(fields[0]))
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("auth: tokens file %s line %d: %w", path, line+1, err)
	}
	return st, nil
}

// Verify returns the identity of a static token: one map lookup and a
// constant-time comparison of digests, whatever the number of tokens. Safe
// for concurrent use.
func (st *staticTokens) Verify(token string) (Identity, error) {
	if token == "" {
		return Identity{}, ErrMissing
	}
	// A token of up to len(buf) bytes is hashed without an allocation.
	var buf [256]byte
	sum := sha256.Sum256(append(buf[:0], token...))
	i, _ := st.lookup(&sum)
	if i < 0 {
		return Identity{}, ErrUnknownToken
	}
	return Identity{Subject: st.entries[i].subject}, nil
}

// empty reports whether the file held no token (Reloadable refuses to
// reload to it).
func (st *staticTokens) empty() bool { return len(st.entries) == 0 }

// add puts an entry at the head of its digest's chain. Used by LoadTokens
// only.
func (st *staticTokens) add(sum [sha256.Size]byte, subject string) {
	k := digestKey(&sum)
	next, ok := st.index[k]
	if !ok {
		next = -1
	}
	st.index[k] = int32(len(st.entries))
	st.entries = append(st.entries, tokenEntry{sum: sum, subject: subject, next: next})
}

// lookup returns the entry of a digest, -1 for none, and how many digests
// it compared (for the tests: at most the length of one chain).
func (st *staticTokens) lookup(sum *[sha256.Size]byte) (entry int, compared int) {
	i, ok := st.index[digestKey(sum)]
	if !ok {
		return -1, 0
	}
	for ; i >= 0; i = st.entries[i].next {
		compared++
		if subtle.ConstantTimeCompare(sum[:], st.entries[i].sum[:]) == 1 {
			return int(i), compared
		}
	}
	return -1, compared
}
