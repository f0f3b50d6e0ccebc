package auth

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadTokens(t *testing.T) {
	dir := t.TempDir()
	path := writeFile(t, dir, "tokens", []byte(
		"# static tokens\n"+
			"\n"+
			"alice  tok-alice-0123456789\n"+
			"   # an indented comment\n"+
			"bob\ttok-bob-9876543210  \n"+
			"carol tok-c\n"))
	v, err := LoadTokens(path)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		token string
		sub   string
		want  error
	}{
		{name: "alice", token: "tok-alice-0123456789", sub: "alice"},
		{name: "bob after a tab", token: "tok-bob-9876543210", sub: "bob"},
		{name: "short token", token: "tok-c", sub: "carol"},
		{name: "wrong", token: "tok-mallory-000000", want: ErrUnknownToken},
		{name: "prefix of a token", token: "tok-alice", want: ErrUnknownToken},
		{name: "token with a suffix", token: "tok-alice-0123456789x", want: ErrUnknownToken},
		{name: "subject is not a token", token: "alice", want: ErrUnknownToken},
		{name: "comment text is not a token", token: "tokens", want: ErrUnknownToken},
		{name: "empty", token: "", want: ErrMissing},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id, err := v.Verify(tt.token)
			checkNoToken(t, err, tt.token)
			if tt.want != nil {
				if !errors.Is(err, tt.want) || !errors.Is(err, ErrInvalid) {
					t.Fatalf("err = %v, want %v", err, tt.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if id != (Identity{Subject: tt.sub}) {
				t.Fatalf("identity %+v, want subject %q and no expiry", id, tt.sub)
			}
		})
	}
}

func TestLoadTokensMalformed(t *testing.T) {
	const secret = "SECRET-TOKEN-TEXT"
	tests := []struct {
		name string
		file string
		want string
	}{
		{"three fields", "# c\nalice ok-token\nbob " + secret + " extra\n", "line 3"},
		{"token alone", "\n\n\n" + secret + "\n", "line 4"},
		{"same token twice", "alice " + secret + "\nbob x\ncarol " + secret + "\n", "line 3: same token as line 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeFile(t, t.TempDir(), "tokens", []byte(tt.file))
			_, err := LoadTokens(path)
			if err == nil {
				t.Fatal("loaded")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %q does not say %q", err, tt.want)
			}
			if strings.Contains(err.Error(), secret) {
				t.Fatalf("error %q contains the token", err)
			}
		})
	}
	if _, err := LoadTokens(t.TempDir() + "/missing"); err == nil {
		t.Fatal("missing file loaded")
	}
}

func TestLoadTokensEmptyFile(t *testing.T) {
	v, err := LoadTokens(writeFile(t, t.TempDir(), "tokens", []byte("# nobody\n")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify("anything"); !errors.Is(err, ErrUnknownToken) {
		t.Fatalf("err = %v", err)
	}
}

// BenchmarkStaticTokens is a lookup in a tokens file of 10 and of 10,000
// tokens: a listed token (the last line) and an unknown one. The lookup
// must not grow with the file (issue 20 item 5).
func BenchmarkStaticTokens(b *testing.B) {
	for _, n := range []int{10, 10000} {
		var file strings.Builder
		for i := range n {
			fmt.Fprintf(&file, "subject-%d tok-%064d\n", i, i)
		}
		path := filepath.Join(b.TempDir(), "tokens")
		if err := os.WriteFile(path, []byte(file.String()), 0o600); err != nil {
			b.Fatal(err)
		}
		v, err := LoadTokens(path)
		if err != nil {
			b.Fatal(err)
		}
		for _, tt := range []struct {
			name, token string
			ok          bool
		}{
			{"listed", fmt.Sprintf("tok-%064d", n-1), true},
			{"unknown", fmt.Sprintf("tok-%064d", n), false},
		} {
			b.Run(fmt.Sprintf("tokens=%d/%s", n, tt.name), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, err := v.Verify(tt.token); (err == nil) != tt.ok {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// TestStaticTokensLookupBounded is issue 20 item 5: a static token was
// found by comparing its digest with every entry of the file, 10,000
// comparisons for 10,000 tokens per upgrade. Now one map lookup picks the
// entry and one constant-time comparison confirms it, for a listed token;
// an unknown one compares nothing. Entries whose digests share their first
// 8 bytes (the map's key) are chained, and each is found.
func TestStaticTokensLookupBounded(t *testing.T) {
	const n = 10000
	var file strings.Builder
	for i := range n {
		fmt.Fprintf(&file, "subject-%d tok-%064d\n", i, i)
	}
	v, err := LoadTokens(writeFile(t, t.TempDir(), "tokens", []byte(file.String())))
	if err != nil {
		t.Fatal(err)
	}
	st := v.(*staticTokens)
	for _, tt := range []struct {
		token    string
		entry    int
		compared int
	}{
		{fmt.Sprintf("tok-%064d", 0), 0, 1},
		{fmt.Sprintf("tok-%064d", n/2), n / 2, 1},
		{fmt.Sprintf("tok-%064d", n-1), n - 1, 1},
		{fmt.Sprintf("tok-%064d", n), -1, 0},
		{"tok-", -1, 0},
	} {
		sum := sha256.Sum256([]byte(tt.token))
		if entry, compared := st.lookup(&sum); entry != tt.entry || compared != tt.compared {
			t.Errorf("%s: entry %d after %d comparisons, want %d after %d", tt.token, entry, compared, tt.entry, tt.compared)
		}
	}

	// Three digests with the same first 8 bytes, and one unlisted.
	chain := &staticTokens{index: make(map[uint64]int32)}
	var sums [4][sha256.Size]byte
	for i := range sums {
		sums[i][8] = byte(i + 1)
	}
	for i, sub := range []string{"a", "b", "c"} {
		chain.add(sums[i], sub)
	}
	for i, want := range []struct{ entry, compared int }{{0, 3}, {1, 2}, {2, 1}, {-1, 3}} {
		if entry, compared := chain.lookup(&sums[i]); entry != want.entry || compared != want.compared {
			t.Errorf("chained digest %d: entry %d after %d comparisons, want %d after %d", i, entry, compared, want.entry, want.compared)
		}
	}
}

// TestStaticTokensNoAllocation: Verify hashes a token of up to 256 bytes
// without an allocation (it converted the token to a []byte before, one
// allocation per upgrade), listed or not.
func TestStaticTokensNoAllocation(t *testing.T) {
	v, err := LoadTokens(writeFile(t, t.TempDir(), "tokens", []byte("alice tok-"+strings.Repeat("a", 200)+"\n")))
	if err != nil {
		t.Fatal(err)
	}
	for _, token := range []string{"tok-" + strings.Repeat("a", 200), "tok-" + strings.Repeat("b", 200)} {
		if n := testing.AllocsPerRun(100, func() { _, _ = v.Verify(token) }); n != 0 {
			t.Errorf("Verify: %.0f allocations, want 0", n)
		}
	}
}
