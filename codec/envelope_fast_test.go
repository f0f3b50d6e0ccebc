package codec

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"pgregory.net/rapid"
)

// sameSlice reports whether a and b are both nil or are the same slice of the
// same array: same first element, length and capacity.
func sameSlice(a, b []byte) bool {
	if (a == nil) != (b == nil) {
		return false
	}
	return unsafe.SliceData(a) == unsafe.SliceData(b) && len(a) == len(b) && cap(a) == cap(b)
}

// sameEnvelope reports whether a and b are the same result for one message:
// every field equal, every slice at the same position of the message.
func sameEnvelope(a, b Envelope) bool {
	return a.Kind == b.Kind && a.IDKind == b.IDKind && sameSlice(a.ID, b.ID) && sameSlice(a.JSONRPC, b.JSONRPC) &&
		sameSlice(a.Method, b.Method) && sameSlice(a.Params, b.Params) && sameSlice(a.CancelID, b.CancelID) &&
		sameSlice(a.SubscriptionID, b.SubscriptionID)
}

// envPositions describes where e's slices lie in msg, for failure messages.
func envPositions(msg []byte, e Envelope) string {
	pos := func(s []byte) string {
		if s == nil {
			return "nil"
		}
		off := int(uintptr(unsafe.Pointer(unsafe.SliceData(s))) - uintptr(unsafe.Pointer(unsafe.SliceData(msg))))
		return strconv.Itoa(off) + "+" + strconv.Itoa(len(s)) + "/" + strconv.Itoa(cap(s))
	}
	return "id@" + pos(e.ID) + " jsonrpc@" + pos(e.JSONRPC) + " method@" + pos(e.Method) + " params@" + pos(e.Params) +
		" cancel@" + pos(e.CancelID) + " sub@" + pos(e.SubscriptionID)
}

// checkFastPath asserts that Classify, fast path included, returns exactly
// what classifyGeneral returns for msg on both bindings.
func checkFastPath(t interface{ Fatalf(string, ...any) }, msg []byte) {
	for _, ws := range []bool{false, true} {
		got, want := Classify(msg, ws), classifyGeneral(msg, ws)
		if !sameEnvelope(got, want) {
			t.Fatalf("ws=%v: Classify(%q) differs from the general path\n got  %s\n      %s\n want %s\n      %s",
				ws, msg, envString(got), envPositions(msg, got), envString(want), envPositions(msg, want))
		}
	}
}

// canonical builds a message of the fast path's shape from its parts.
func canonical(id, method, params, tail string) string {
	return `{"jsonrpc":"2.0","id":` + id + `,"method":` + method + `,"params":` + params + `}` + tail
}

// Parts of canonical-shape messages for the seeds and the generator: values
// the fast path takes and values it must leave to the general path.
var (
	seedIDs = []string{`0`, `-0`, `-1`, `1`, `1234`, `12345678`, `123456789`, `999999999999999999`,
		`9223372036854775807`, `9223372036854775808`, `-9223372036854775808`, `-9223372036854775809`,
		`123456789012345678901234567890`, `1e3`, `1E3`, `1.0`, `-`, `01`, `-01`, `00`, `+1`, `null`, `true`, `{}`, `[]`,
		`"a"`, `"a\u0062"`, `""`, `"req-1024"`, `"é"`, `"a\"b"`, `"a\"`, "\"\x01\"", `"2.0"`}
	seedMethods = []string{`"edge/echo"`, `"edge\/echo"`, `""`, `"m"`, `"$/cancelRequest"`, `"$\/cancelRequest"`,
		`"subscription/cancel"`, `"subscription\/cancel"`, `"$/cancelrequest"`, `"é"`, `"m\u00e9"`, `1`, `null`}
	seedParams = []string{`{}`, `[]`, `null`, `1`, `-0.5e3`, `"x"`, `true`, `{"p":"0123456789ab"}`, `{"id":1}`,
		`{"id":"x"}`, `{"id":1.5}`, `{"subscriptionId":"s"}`, `{"a":[1,{"b":null}],"c":true}`, `{ "a" : 1 , "b":2 }`,
		`{"k\u0061":"é"}`, `{"a":}`, `{"a":1,}`, `{"a" 1}`, `{"a":1`, `[1,]`, `tru`, "{\"a\":\"\xff\"}", `{"a":01}`, ``}
	seedTails = []string{``, ` `, " \r\n\t", `x`, `}`, `,`, `{}`, " \x00"}
)

// canonicalSeeds returns canonical-shape variants of every part, params
// nested up to and beyond the depth limit, and three messages truncated at
// every byte.
func canonicalSeeds() []string {
	const echo = `{"p":"0123456789ab"}`
	var seeds []string
	for _, id := range seedIDs {
		for _, m := range seedMethods {
			for _, p := range []string{echo, `{"id":1}`, `{"subscriptionId":"s"}`} {
				seeds = append(seeds, canonical(id, m, p, ""))
			}
		}
	}
	for _, n := range []int{9998, 9999} { // depth 10000 and 10001 with the envelope and params
		seeds = append(seeds, canonical(`1`, `"m"`, `{"a":`+strings.Repeat("[", n)+strings.Repeat("]", n)+`}`, ""))
	}
	for _, p := range seedParams {
		for _, tail := range seedTails {
			seeds = append(seeds, canonical(`1`, `"edge/echo"`, p, tail))
		}
	}
	for _, msg := range []string{
		canonical(`1234`, `"edge/echo"`, echo, ""),
		canonical(`"req-1024"`, `"edge/echo"`, `[1,"a",{"b":null}]`, "\n"),
		canonical(`7`, `"$/cancelRequest"`, `{"id":7}`, ""),
	} {
		for i := range len(msg) + 1 {
			seeds = append(seeds, msg[:i])
		}
	}
	return seeds
}

// readFuzzCorpus returns the inputs of a native-fuzzing corpus directory of
// one []byte argument.
func readFuzzCorpus(t testing.TB, dir string) [][]byte {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no corpus in %s (err %v)", dir, err)
	}
	var out [][]byte
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		if len(lines) != 2 || lines[0] != "go test fuzz v1" {
			t.Fatalf("%s: not a one-value corpus file", f)
		}
		lit, ok := strings.CutPrefix(lines[1], "[]byte(")
		if !ok || !strings.HasSuffix(lit, ")") {
			t.Fatalf("%s: not a []byte value: %s", f, lines[1])
		}
		s, err := strconv.Unquote(strings.TrimSuffix(lit, ")"))
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out = append(out, []byte(s))
	}
	return out
}

// FuzzClassifyFastPath checks that Classify's fast path (scanCanonical)
// changes no result: for any input and both bindings Classify must return
// exactly what classifyGeneral returns, every slice at the same position.
// It is seeded with FuzzClassify's corpus and with canonical-shape variants.
func FuzzClassifyFastPath(f *testing.F) {
	for _, msg := range readFuzzCorpus(f, filepath.Join("testdata", "fuzz", "FuzzClassify")) {
		f.Add(msg)
	}
	for _, s := range canonicalSeeds() {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, msg []byte) {
		checkFastPath(t, msg)
	})
}

// canonicalGen generates messages of or near the fast path's shape: the parts
// above, any JSON value as params, sometimes one byte-level edit.
func canonicalGen() *rapid.Generator[string] {
	return rapid.Custom(func(t *rapid.T) string {
		params := rapid.SampledFrom(seedParams).Draw(t, "params")
		if rapid.Bool().Draw(t, "generated params") {
			params = strings.TrimSpace(jsonGen(3).Draw(t, "json"))
		}
		msg := canonical(rapid.SampledFrom(seedIDs).Draw(t, "id"), rapid.SampledFrom(seedMethods).Draw(t, "method"),
			params, rapid.SampledFrom(seedTails).Draw(t, "tail"))
		return jsonMutate(t, msg)
	})
}

// TestClassifyFastPathDifferential checks generated near-canonical messages
// against the general path and against the encoding/json reference model.
func TestClassifyFastPathDifferential(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		msg := []byte(canonicalGen().Draw(t, "msg"))
		checkFastPath(t, msg)
		checkClassify(t, msg)
	})
}

// TestClassifyFastPathSeeds runs the canonical seeds through both checks in
// every test run, not only when fuzzing.
func TestClassifyFastPathSeeds(t *testing.T) {
	for _, s := range canonicalSeeds() {
		checkFastPath(t, []byte(s))
		checkClassify(t, []byte(s))
	}
}

// TestClassifyFastPath pins hand-picked shapes: whether the fast path takes
// them (fast) and the exact result, which must also be the general path's.
// A fast path that typed an id differently, dropped the jsonrpc value,
// accepted trailing bytes or claimed a $/cancelRequest would fail here.
func TestClassifyFastPath(t *testing.T) {
	const (
		echoP = `{"p":"0123456789ab"}`
		mEcho = `"edge/echo"`
		jr20  = `"2.0"`
	)
	type result struct {
		kind                        Kind
		idKind                      IDKind
		id, jsonrpc, method, params string // raw tokens, or envNone
		cancel                      string // CancelID, or envNone
	}
	tracked := func(id string, k IDKind, method, params string) result {
		return result{KindTracked, k, id, jr20, method, params, envNone}
	}
	none := func(k Kind) result { return result{k, IDNone, envNone, envNone, envNone, envNone, envNone} }
	deep := `{"a":` + strings.Repeat("[", 9998) + strings.Repeat("]", 9998) + `}`
	tests := []struct {
		name string
		msg  string
		ws   bool
		fast bool
		want result
	}{
		// The fast path.
		{"echo", canonical(`1234`, mEcho, echoP, ""), true, true, tracked(`1234`, IDInt, mEcho, echoP)},
		{"echo on NDJSON", canonical(`1234`, mEcho, echoP, ""), false, true, tracked(`1234`, IDInt, mEcho, echoP)},
		{"string id", canonical(`"req-1"`, mEcho, echoP, ""), true, true, tracked(`"req-1"`, IDString, mEcho, echoP)},
		{"empty string id", canonical(`""`, mEcho, `{}`, ""), true, true, tracked(`""`, IDString, mEcho, `{}`)},
		{"string id of digits stays a string", canonical(`"1"`, mEcho, `{}`, ""), true, true, tracked(`"1"`, IDString, mEcho, `{}`)},
		{"zero id", canonical(`0`, mEcho, `{}`, ""), true, true, tracked(`0`, IDInt, mEcho, `{}`)},
		{"negative zero id", canonical(`-0`, mEcho, `{}`, ""), true, true, tracked(`-0`, IDInt, mEcho, `{}`)},
		{"negative id", canonical(`-1`, mEcho, `{}`, ""), true, true, tracked(`-1`, IDInt, mEcho, `{}`)},
		{"eight-digit id", canonical(`12345678`, mEcho, `{}`, ""), true, true, tracked(`12345678`, IDInt, mEcho, `{}`)},
		{"nine-digit id", canonical(`123456789`, mEcho, `{}`, ""), true, true, tracked(`123456789`, IDInt, mEcho, `{}`)},
		{"max int64 id", canonical(`9223372036854775807`, mEcho, `{}`, ""), true, true,
			tracked(`9223372036854775807`, IDInt, mEcho, `{}`)},
		{"min int64 id", canonical(`-9223372036854775808`, mEcho, `{}`, ""), true, true,
			tracked(`-9223372036854775808`, IDInt, mEcho, `{}`)},
		{"empty method", canonical(`1`, `""`, `{}`, ""), true, true, tracked(`1`, IDInt, `""`, `{}`)},
		{"method differing in case from $/cancelRequest", canonical(`1`, `"$/cancelrequest"`, `{"id":1}`, ""), true, true,
			tracked(`1`, IDInt, `"$/cancelrequest"`, `{"id":1}`)},
		{"params array", canonical(`1`, mEcho, `[1,"a"]`, ""), true, true, tracked(`1`, IDInt, mEcho, `[1,"a"]`)},
		{"params null", canonical(`1`, mEcho, `null`, ""), true, true, tracked(`1`, IDInt, mEcho, `null`)},
		{"params number", canonical(`1`, mEcho, `-1.5e3`, ""), true, true, tracked(`1`, IDInt, mEcho, `-1.5e3`)},
		{"params string", canonical(`1`, mEcho, `"x"`, ""), true, true, tracked(`1`, IDInt, mEcho, `"x"`)},
		{"params nested", canonical(`1`, mEcho, `{"a":[1,{"b":null}],"c":true}`, ""), true, true,
			tracked(`1`, IDInt, mEcho, `{"a":[1,{"b":null}],"c":true}`)},
		{"params with whitespace", canonical(`1`, mEcho, `{ "a" : 1 , "b" : [ ] }`, ""), true, true,
			tracked(`1`, IDInt, mEcho, `{ "a" : 1 , "b" : [ ] }`)},
		{"params with escapes and UTF-8", canonical(`1`, mEcho, `{"k\u0061":"é"}`, ""), true, true,
			tracked(`1`, IDInt, mEcho, `{"k\u0061":"é"}`)},
		{"params at depth 10000", canonical(`1`, mEcho, deep, ""), true, true, tracked(`1`, IDInt, mEcho, deep)},
		{"trailing whitespace", canonical(`1`, mEcho, `{}`, " \r\n\t"), true, true, tracked(`1`, IDInt, mEcho, `{}`)},
		{"shortest", canonical(`1`, `""`, `0`, ""), true, true, tracked(`1`, IDInt, `""`, `0`)},

		// The general path, with the same results as ever.
		{"jsonrpc 1.0 keeps its value", `{"jsonrpc":"1.0","id":1,"method":"m","params":{}}`, true, false,
			result{KindTracked, IDInt, `1`, `"1.0"`, `"m"`, `{}`, envNone}},
		{"escaped string id", canonical(`"a\u0062"`, mEcho, `{}`, ""), true, false, tracked(`"a\u0062"`, IDString, mEcho, `{}`)},
		{"UTF-8 string id", canonical(`"é"`, mEcho, `{}`, ""), true, false, tracked(`"é"`, IDString, mEcho, `{}`)},
		{"escaped method", canonical(`1`, `"edge\/echo"`, `{}`, ""), true, false, tracked(`1`, IDInt, `"edge\/echo"`, `{}`)},
		{"id and $/cancelRequest on WebSocket cancels", canonical(`9`, `"$/cancelRequest"`, `{"id":1}`, ""), true, false,
			result{KindCancel, IDInt, envNone, jr20, `"$/cancelRequest"`, `{"id":1}`, `1`}},
		{"id and $/cancelRequest on NDJSON is tracked", canonical(`9`, `"$/cancelRequest"`, `{"id":1}`, ""), false, false,
			tracked(`9`, IDInt, `"$/cancelRequest"`, `{"id":1}`)},
		{"id and subscription/cancel is tracked", canonical(`3`, `"subscription/cancel"`, `{"subscriptionId":"s"}`, ""),
			true, false, tracked(`3`, IDInt, `"subscription/cancel"`, `{"subscriptionId":"s"}`)},
		{"id above int64", canonical(`9223372036854775808`, mEcho, `{}`, ""), true, false, none(KindInvalid)},
		{"id below int64", canonical(`-9223372036854775809`, mEcho, `{}`, ""), true, false, none(KindInvalid)},
		{"id with 30 digits", canonical(`123456789012345678901234567890`, mEcho, `{}`, ""), true, false, none(KindInvalid)},
		{"fraction id", canonical(`1.0`, mEcho, `{}`, ""), true, false, none(KindInvalid)},
		{"exponent id", canonical(`1e3`, mEcho, `{}`, ""), true, false, none(KindInvalid)},
		{"null id", canonical(`null`, mEcho, `{}`, ""), true, false, none(KindInvalid)},
		{"leading zero id", canonical(`01`, mEcho, `{}`, ""), true, false, none(KindParseError)},
		{"bare minus id", canonical(`-`, mEcho, `{}`, ""), true, false, none(KindParseError)},
		{"escaped quote ending what looks like the id", canonical(`"a\"`, mEcho, `{}`, ""), true, false, none(KindParseError)},
		{"control character in id", canonical("\"\x01\"", mEcho, `{}`, ""), true, false, none(KindParseError)},
		{"trailing garbage", canonical(`1`, mEcho, `{}`, "x"), true, false, none(KindParseError)},
		{"trailing brace", canonical(`1`, mEcho, `{}`, "}"), true, false, none(KindParseError)},
		{"trailing NUL", canonical(`1`, mEcho, `{}`, " \x00"), true, false, none(KindParseError)},
		{"two messages", canonical(`1`, mEcho, `{}`, canonical(`2`, mEcho, `{}`, "")), true, false, none(KindParseError)},
		{"truncated", strings.TrimSuffix(canonical(`1`, mEcho, echoP, ""), "}"), true, false, none(KindParseError)},
		{"invalid params", canonical(`1`, mEcho, `{"a":}`, ""), true, false, none(KindParseError)},
		{"params trailing comma", canonical(`1`, mEcho, `{"a":1,}`, ""), true, false, none(KindParseError)},
		{"params with invalid UTF-8", canonical(`1`, mEcho, "{\"a\":\"\xff\"}", ""), true, false, none(KindParseError)},
		{"params at depth 10001", canonical(`1`, mEcho, `{"a":[`+deep[5:len(deep)-1]+`]}`, ""), true, false, none(KindParseError)},
		{"whitespace before params' closing brace", `{"jsonrpc":"2.0","id":1,"method":"m","params":{} }`, true, false,
			tracked(`1`, IDInt, `"m"`, `{}`)},
		{"whitespace after a colon", `{"jsonrpc":"2.0","id": 1,"method":"m","params":{}}`, true, false,
			tracked(`1`, IDInt, `"m"`, `{}`)},
		{"leading whitespace", " " + canonical(`1`, mEcho, `{}`, ""), true, false, tracked(`1`, IDInt, mEcho, `{}`)},
		{"other member order", `{"id":1,"jsonrpc":"2.0","method":"m","params":{}}`, true, false, tracked(`1`, IDInt, `"m"`, `{}`)},
		{"extra member", `{"jsonrpc":"2.0","id":1,"method":"m","params":{},"x":0}`, true, false, tracked(`1`, IDInt, `"m"`, `{}`)},
		{"repeated params", `{"jsonrpc":"2.0","id":1,"method":"m","params":{},"params":[]}`, true, false,
			result{KindUntracked, IDInt, `1`, jr20, `"m"`, `[]`, envNone}},
		{"missing params", `{"jsonrpc":"2.0","id":1,"method":"m"}`, true, false,
			result{KindUntracked, IDInt, `1`, jr20, `"m"`, envNone, envNone}},
		{"escaped key", `{"jsonrpc":"2.0","\u0069d":1,"method":"m","params":{}}`, true, false, tracked(`1`, IDInt, `"m"`, `{}`)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msg := []byte(tt.msg)
			if _, _, pe := scanCanonical(msg); (pe >= 0) != tt.fast {
				t.Errorf("fast path taken = %v, want %v", pe >= 0, tt.fast)
			}
			e := Classify(msg, tt.ws)
			if e.Kind != tt.want.kind || e.IDKind != tt.want.idKind {
				t.Fatalf("Kind, IDKind = %v, %v; want %v, %v", e.Kind, e.IDKind, tt.want.kind, tt.want.idKind)
			}
			envCheckField(t, "ID", e.ID, tt.want.id)
			envCheckField(t, "JSONRPC", e.JSONRPC, tt.want.jsonrpc)
			envCheckField(t, "Method", e.Method, tt.want.method)
			envCheckField(t, "Params", e.Params, tt.want.params)
			envCheckField(t, "CancelID", e.CancelID, tt.want.cancel)
			envCheckField(t, "SubscriptionID", e.SubscriptionID, envNone)
			for _, s := range [][]byte{e.ID, e.JSONRPC, e.Method, e.Params, e.CancelID} {
				if s != nil && (!sliceWithin(msg, s) || cap(s) != len(s)) {
					t.Errorf("%q does not alias msg with its capacity clipped", s)
				}
			}
			if want := classifyGeneral(msg, tt.ws); !sameEnvelope(e, want) {
				t.Errorf("general path disagrees:\n got  %s %s\n want %s %s",
					envString(e), envPositions(msg, e), envString(want), envPositions(msg, want))
			}
		})
	}
}
