package codec

import (
	"encoding/binary"
	"encoding/json"
	"math/bits"
	"strings"
	"testing"
	"unicode/utf8"

	"pgregory.net/rapid"
)

// jsonOracleValid is the reference verdict: encoding/json.Valid does not check
// UTF-8 inside strings (it only rejects control characters there), while
// RFC 8259 section 8.1 and ValidJSON require valid UTF-8. Outside strings any
// non-ASCII byte is already a syntax error, so whole-input UTF-8 validity is
// exactly the missing check.
func jsonOracleValid(b []byte) bool {
	return json.Valid(b) && utf8.Valid(b)
}

func TestJSONValid(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want bool
	}{
		{"empty", "", false},
		{"only space", " \t\r\n", false},
		{"null", "null", true},
		{"true padded", " \ttrue\r\n", true},
		{"false", "false", true},
		{"truncated literal", "tru", false},
		{"literal with tail", "nullx", false},
		{"capital literal", "True", false},
		{"zero", "0", true},
		{"negative zero", "-0", true},
		{"leading zero", "01", false},
		{"negative leading zero", "-01", false},
		{"plus sign", "+1", false},
		{"bare minus", "-", false},
		{"fraction", "1.5", true},
		{"dot without digits", "1.", false},
		{"leading dot", ".5", false},
		{"exponent", "1e10", true},
		{"exponent signs", "1E+10 ", true},
		{"exponent negative", "-1.25e-3", true},
		{"exponent without digits", "1e", false},
		{"exponent sign only", "1e+", false},
		{"hex number", "0x10", false},
		{"big integer", "123456789012345678901234567890", true},
		{"string", `"abc"`, true},
		{"escapes", `"\"\\\/\b\f\n\r\t\u00e9\uD83D\uDE00"`, true},
		{"lone surrogate escape", `"\ud800"`, true},
		{"bad escape", `"\x"`, false},
		{"short unicode escape", `"\u12"`, false},
		{"non-hex unicode escape", `"\u12g4"`, false},
		{"unterminated", `"abc`, false},
		{"backslash at end", `"abc\`, false},
		{"raw newline", "\"a\nb\"", false},
		{"raw NUL", "\"a\x00b\"", false},
		{"raw DEL allowed", "\"a\x7fb\"", true},
		{"utf8 two and four bytes", "\"é😀\"", true},
		{"invalid utf8 byte", "\"\xff\"", false},
		{"truncated utf8", "\"\xc3\"", false},
		{"overlong utf8", "\"\xc0\xaf\"", false},
		{"utf8 surrogate", "\"\xed\xa0\x80\"", false},
		{"U+FFFD literal", "\"\xef\xbf\xbd\"", true},
		{"BOM", "\xef\xbb\xbf{}", false},
		{"empty object", "{}", true},
		{"empty array", "[ ]", true},
		{"object", `{"a":1,"b":[true,null,{"c":"d"}]}`, true},
		{"whitespace everywhere", " { \"a\" : [ 1 , 2 ] , \"b\" : { } } ", true},
		{"trailing comma object", `{"a":1,}`, false},
		{"trailing comma array", `[1,]`, false},
		{"leading comma", `[,1]`, false},
		{"double comma", `[1,,2]`, false},
		{"missing colon", `{"a" 1}`, false},
		{"missing value", `{"a":}`, false},
		{"non-string key", `{1:2}`, false},
		{"single quotes", `{'a':1}`, false},
		{"unclosed object", `{"a":1`, false},
		{"unclosed array", `[1`, false},
		{"mismatched close", `[1}`, false},
		{"extra close", `[1]]`, false},
		{"two values", `{} {}`, false},
		{"trailing garbage", `{"a":1} x`, false},
		{"comment", `{} // x`, false},
		{"NaN", `NaN`, false},
		{"vertical tab is not space", "\v1", false},
		{"nbsp is not space", "\u00a01", false},
		{"depth 10000", strings.Repeat("[", 10000) + strings.Repeat("]", 10000), true},
		{"depth 10001", strings.Repeat("[", 10001) + strings.Repeat("]", 10001), false},
		{"depth 10000 objects", strings.Repeat(`{"a":`, 9999) + "{}" + strings.Repeat("}", 9999), true},
		{"depth 10001 objects", strings.Repeat(`{"a":`, 10000) + "{}" + strings.Repeat("}", 10000), false},
		{"depth 200 mixed", strings.Repeat(`[{"a":`, 100) + "1" + strings.Repeat("}]", 100), true},
		{"deep unclosed", strings.Repeat("[", 20000), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ValidJSON([]byte(tt.in)); got != tt.want {
				t.Errorf("ValidJSON(%.40q) = %v, want %v", tt.in, got, tt.want)
			}
			if got := jsonOracleValid([]byte(tt.in)); got != tt.want {
				t.Errorf("oracle(%.40q) = %v, want %v (table is wrong)", tt.in, got, tt.want)
			}
		})
	}
}

func TestJSONAppendUnquote(t *testing.T) {
	tests := []struct {
		name string
		tok  string
		ok   bool
	}{
		{"plain", `"abc"`, true},
		{"empty", `""`, true},
		{"escapes", `"a\"b\\c\/d\be\ff\ng\rh\ti"`, true},
		{"unicode", `"\u0061\u00e9\u20AC"`, true},
		{"surrogate pair", `"\uD83D\uDE00"`, true},
		{"lone high surrogate", `"\uD83Dx"`, true},
		{"lone low surrogate", `"\uDE00"`, true},
		{"high then non-low escape", `"\uD83D\u0041"`, true},
		{"two high surrogates", `"\uD83D\uD83D\uDE00"`, true},
		{"raw utf8", `"é😀"`, true},
		{"no quotes", `abc`, false},
		{"one quote", `"`, false},
		{"trailing data", `"a"b`, false},
		{"bad escape", `"\q"`, false},
		{"invalid utf8", "\"\xff\"", false},
		{"number", `12`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prefix := []byte("pre")
			got, ok := AppendUnquote(prefix, []byte(tt.tok))
			if ok != tt.ok {
				t.Fatalf("AppendUnquote(%q) ok = %v, want %v", tt.tok, ok, tt.ok)
			}
			if !ok {
				if string(got) != "pre" {
					t.Fatalf("failed AppendUnquote changed dst to %q", got)
				}
				return
			}
			var want string
			if err := json.Unmarshal([]byte(tt.tok), &want); err != nil {
				t.Fatalf("encoding/json rejects %q: %v", tt.tok, err)
			}
			if string(got) != "pre"+want {
				t.Errorf("AppendUnquote(%q) = %q, want %q", tt.tok, got, "pre"+want)
			}
			if !unquotedEquals([]byte(tt.tok), want) {
				t.Errorf("unquotedEquals(%q, %q) = false", tt.tok, want)
			}
			if unquotedEquals([]byte(tt.tok), want+"x") {
				t.Errorf("unquotedEquals(%q, %q) = true", tt.tok, want+"x")
			}
		})
	}
}

// jsonGen generates valid JSON texts, with random whitespace, escapes,
// numbers at the int64 edges and nesting.
func jsonGen(depth int) *rapid.Generator[string] {
	ws := rapid.SampledFrom([]string{"", "", "", " ", "\t", "\r\n", "  \n "})
	scalar := rapid.SampledFrom([]string{
		`0`, `-0`, `1`, `-17`, `1.5`, `-0.0e+1`, `1E2`, `9223372036854775807`, `9223372036854775808`,
		`true`, `false`, `null`, `""`, `"a"`, `"\u0061"`, `"\ud800"`, `"é"`, `"\"\\"`, `"2.0"`,
		`"$/cancelRequest"`, `"x\/y"`,
	})
	return rapid.Custom(func(t *rapid.T) string {
		var gen func(d int) string
		gen = func(d int) string {
			if d <= 0 || rapid.IntRange(0, 2).Draw(t, "leaf") > 0 {
				return scalar.Draw(t, "scalar")
			}
			n := rapid.IntRange(0, 3).Draw(t, "n")
			var sb strings.Builder
			if rapid.Bool().Draw(t, "obj") {
				keys := rapid.SampledFrom([]string{`"a"`, `"id"`, `"\u0069d"`, `"jsonrpc"`, `"params"`, `""`})
				sb.WriteString("{")
				for i := range n {
					if i > 0 {
						sb.WriteString(",")
					}
					sb.WriteString(ws.Draw(t, "ws") + keys.Draw(t, "key") + ws.Draw(t, "ws") + ":" + ws.Draw(t, "ws"))
					sb.WriteString(gen(d-1) + ws.Draw(t, "ws"))
				}
				sb.WriteString(ws.Draw(t, "ws") + "}")
				return sb.String()
			}
			sb.WriteString("[")
			for i := range n {
				if i > 0 {
					sb.WriteString(",")
				}
				sb.WriteString(ws.Draw(t, "ws") + gen(d-1) + ws.Draw(t, "ws"))
			}
			sb.WriteString(ws.Draw(t, "ws") + "]")
			return sb.String()
		}
		return ws.Draw(t, "ws") + gen(depth) + ws.Draw(t, "ws")
	})
}

// jsonMutate applies one random byte-level edit (delete, insert, replace) so
// that near-valid inputs exercise the error paths.
func jsonMutate(t *rapid.T, s string) string {
	if rapid.IntRange(0, 3).Draw(t, "mutate") == 0 {
		return s
	}
	b := []byte(s)
	alphabet := []byte("{}[]\":,\\/0123456789-+.eEtrufalsn u\t\n\x00\x1f\x7f\xc3\xa9\xff")
	pos := rapid.IntRange(0, len(b)).Draw(t, "pos")
	c := rapid.SampledFrom(alphabet).Draw(t, "byte")
	switch op := rapid.IntRange(0, 2).Draw(t, "op"); {
	case op == 0 && pos < len(b):
		b = append(b[:pos], b[pos+1:]...)
	case op == 1 && pos < len(b):
		b[pos] = c
	default:
		b = append(b[:pos], append([]byte{c}, b[pos:]...)...)
	}
	return string(b)
}

// TestJSONValidDifferential checks ValidJSON against encoding/json.Valid (plus
// UTF-8 validity, see jsonOracleValid) on generated and mutated JSON.
func TestJSONValidDifferential(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		in := []byte(jsonMutate(t, jsonGen(4).Draw(t, "json")))
		if got, want := ValidJSON(in), jsonOracleValid(in); got != want {
			t.Fatalf("ValidJSON(%q) = %v, oracle says %v", in, got, want)
		}
	})
}

// FuzzJSONValid is the native-fuzzing form of TestJSONValidDifferential.
func FuzzJSONValid(f *testing.F) {
	for _, s := range []string{`{}`, `[1,2]`, `{"a":"\u0061"}`, `-0.5e+3`, "\"\xff\"", `[1,]`, `"\ud800"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if got, want := ValidJSON(in), jsonOracleValid(in); got != want {
			t.Fatalf("ValidJSON(%q) = %v, oracle says %v", in, got, want)
		}
	})
}

// TestJSONStrStops checks the eight-byte string scan exhaustively for one and
// two stop bytes: the lowest flagged byte must be the first byte that is not
// jsonStrSafe, and no byte may be flagged when all eight are safe.
func TestJSONStrStops(t *testing.T) {
	first := func(x [8]byte) int {
		for i, c := range x {
			if !jsonStrSafe[c] {
				return i
			}
		}
		return 8
	}
	got := func(x [8]byte) int {
		m := jsonStrStops(binary.LittleEndian.Uint64(x[:]))
		if m == 0 {
			return 8
		}
		return bits.TrailingZeros64(m) >> 3
	}
	eachTwoBytes([8]byte{'a', 'a', 'a', 'a', 'a', 'a', 'a', 'a'}, func(x [8]byte) {
		if g, w := got(x), first(x); g != w {
			t.Fatalf("jsonStrStops(%q): first stop %d, want %d", x[:], g, w)
		}
	})
}

// eachTwoBytes calls f with base with every value of one byte and of a pair
// of bytes written over it, at every position: the exhaustive input of the
// eight-byte scans' tests.
func eachTwoBytes(base [8]byte, f func([8]byte)) {
	for c1 := range 256 {
		for c2 := range 256 {
			for p := range 8 {
				for q := p; q < 8; q++ {
					x := base
					x[p], x[q] = byte(c1), byte(c2)
					f(x)
				}
			}
		}
	}
}

// TestJSONNonDigits checks the eight-byte digit scan exhaustively for one and
// two non-digit bytes, like TestJSONStrStops.
func TestJSONNonDigits(t *testing.T) {
	first := func(x [8]byte) int {
		for i, c := range x {
			if c < '0' || c > '9' {
				return i
			}
		}
		return 8
	}
	got := func(x [8]byte) int {
		return bits.TrailingZeros64(jsonNonDigits(binary.LittleEndian.Uint64(x[:]))) >> 3
	}
	eachTwoBytes([8]byte{'5', '0', '9', '1', '8', '2', '7', '3'}, func(x [8]byte) {
		if g, w := got(x), first(x); g != w {
			t.Fatalf("jsonNonDigits(%q): first non-digit %d, want %d", x[:], g, w)
		}
	})
}

// TestJSONStrStop checks strStop (and loadTail behind it) for every input
// length up to 24, start and stop position, with stop bytes also placed before
// the start, where they must be ignored (loadTail shifts them out, and their
// borrows with them).
func TestJSONStrStop(t *testing.T) {
	stops := []byte{'"', '\\', 0x00, 0x1f, 0x80, 0xff}
	for n := 0; n <= 24; n++ {
		for i := 0; i <= n; i++ {
			for k := i; k <= n; k++ { // k == n: no stop at or after i
				for _, c := range stops {
					b := []byte(strings.Repeat("a", n))
					for j := range i {
						b[j] = stops[(j+int(c))%len(stops)]
					}
					if k < n {
						b[k] = c
					}
					got := strStop(b, i)
					if k < n && got != k || k == n && got < n {
						t.Fatalf("strStop(%q, %d) = %d, want %d", b, i, got, k)
					}
				}
			}
		}
	}
}
