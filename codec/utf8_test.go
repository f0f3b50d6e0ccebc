package codec

import (
	"encoding/hex"
	"testing"
	"unicode/utf8"

	"pgregory.net/rapid"
)

// utf8Bytes generates byte strings that are often, but not always, UTF-8: whole
// runes, runes cut short, and single bytes from the ranges where validators err
// (continuation bytes, the second-byte limits of E0/ED/F0/F4, invalid leads).
func utf8Bytes() *rapid.Generator[[]byte] {
	tricky := []byte{0x80, 0x8f, 0x90, 0x9f, 0xa0, 0xbf, 0xc0, 0xc1, 0xc2, 0xdf, 0xe0, 0xed, 0xef, 0xf0, 0xf4, 0xf5, 0xf8, 0xfe, 0xff}
	piece := rapid.OneOf(
		rapid.Map(rapid.Rune(), func(r rune) []byte { return utf8.AppendRune(nil, r) }),
		rapid.Map(rapid.ByteRange(0, 0x7f), func(c byte) []byte { return []byte{c} }),
		rapid.Map(rapid.SampledFrom(tricky), func(c byte) []byte { return []byte{c} }),
		rapid.Map(rapid.Byte(), func(c byte) []byte { return []byte{c} }),
		rapid.Custom(func(t *rapid.T) []byte {
			p := utf8.AppendRune(nil, rapid.Rune().Draw(t, "rune"))
			return p[:rapid.IntRange(0, len(p)).Draw(t, "cut")]
		}),
	)
	return rapid.Map(rapid.SliceOfN(piece, 0, 40), func(ps [][]byte) []byte {
		var b []byte
		for _, p := range ps {
			b = append(b, p...)
		}
		return b
	})
}

// firstInvalid returns the index of the first byte after which s cannot become
// valid UTF-8, or -1.
func firstInvalid(s []byte) int {
	for k := range s {
		if !validPrefix(s[:k+1]) {
			return k
		}
	}
	return -1
}

// TestUTF8MatchesStdlib checks that UTF8 accepts exactly what utf8.Valid accepts,
// whatever the split, and fails at exactly the first byte that makes the stream
// unfixable (the fail-fast of Autobahn 6.4.x).
func TestUTF8MatchesStdlib(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := utf8Bytes().Draw(t, "s")
		cuts := rapid.SliceOfN(rapid.IntRange(0, len(s)), 0, 8).Draw(t, "cuts")
		sortInts(cuts)
		bad := firstInvalid(s)

		var u UTF8
		prev, failedIn := 0, -1
		for i := 0; i <= len(cuts); i++ {
			end := len(s)
			if i < len(cuts) {
				end = cuts[i]
			}
			ok := u.Write(s[prev:end])
			if !ok && failedIn < 0 {
				failedIn = end
			}
			if ok && failedIn >= 0 {
				t.Fatalf("Write succeeded after a failure")
			}
			if !ok && bad < 0 {
				t.Fatalf("Write(%x) failed on a valid prefix %x", s[prev:end], s[:end])
			}
			if ok && bad >= 0 && bad < end {
				t.Fatalf("Write accepted %x, invalid at byte %d", s[:end], bad)
			}
			prev = end
		}
		if got, want := u.Done(), utf8.Valid(s); got != want {
			t.Fatalf("Done() = %v, utf8.Valid = %v for %x", got, want, s)
		}
	})
}

// TestUTF8ByteWise feeds the Autobahn 6.x payloads one byte at a time.
func TestUTF8ByteWise(t *testing.T) {
	for _, tc := range autobahnUTF8 {
		t.Run(tc.id, func(t *testing.T) {
			s, err := hex.DecodeString(tc.hex)
			if err != nil {
				t.Fatal(err)
			}
			var u UTF8
			failed := -1
			for i := range s {
				if !u.Write(s[i:i+1]) && failed < 0 {
					failed = i
				}
			}
			if want := firstInvalid(s); failed != want {
				t.Errorf("failed at byte %d, want %d", failed, want)
			}
			if u.Done() != tc.valid {
				t.Errorf("Done() = %v, want %v", u.Done(), tc.valid)
			}
		})
	}
}

func TestUTF8Reset(t *testing.T) {
	var u UTF8
	if u.Write([]byte{0xff}) || u.Done() {
		t.Fatal("0xff accepted")
	}
	u.Reset()
	if !u.Write([]byte("é")[:1]) || u.Done() {
		t.Fatal("half a rune: want Write ok, Done false")
	}
	u.Reset()
	if !u.Write(nil) || !u.Done() {
		t.Fatal("empty stream is valid")
	}
}

func BenchmarkUTF8Write(b *testing.B) {
	p := []byte(`{"jsonrpc":"2.0","id":1,"method":"edge/echo","params":{"text":"héllo wörld κόσμε"}}`)
	b.ReportAllocs()
	b.SetBytes(int64(len(p)))
	for b.Loop() {
		var u UTF8
		if !u.Write(p[:17]) || !u.Write(p[17:]) || !u.Done() {
			b.Fatal("invalid")
		}
	}
}
