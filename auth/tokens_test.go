package auth

import (
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
