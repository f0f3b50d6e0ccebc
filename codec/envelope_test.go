package codec

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"

	"pgregory.net/rapid"
)

// envNone marks an Envelope slice field that must be nil in envelopeCase.
const envNone = "<nil>"

type envelopeCase struct {
	name   string
	msg    string
	ws     bool
	kind   Kind
	id     string // raw token, or envNone
	idKind IDKind
	method string // raw token, or envNone
	params string // raw token, or envNone
	cancel string // CancelID, or envNone
	sub    string // SubscriptionID, or envNone
}

// tracked, untracked, cancel, subCancel, invalid and parseErr build the
// expected outcome of a table row.
func envTracked(name, msg, id string, k IDKind, method, params string) envelopeCase {
	return envelopeCase{name: name, msg: msg, kind: KindTracked, id: id, idKind: k, method: method,
		params: params, cancel: envNone, sub: envNone}
}

func envUntracked(name, msg, id string, k IDKind, method, params string) envelopeCase {
	return envelopeCase{name: name, msg: msg, kind: KindUntracked, id: id, idKind: k, method: method,
		params: params, cancel: envNone, sub: envNone}
}

func envCancel(name, msg, cancelID string, k IDKind) envelopeCase {
	return envelopeCase{name: name, msg: msg, ws: true, kind: KindCancel, id: envNone, idKind: k,
		method: "", params: "", cancel: cancelID, sub: envNone}
}

func envSubCancel(name, msg, sub string) envelopeCase {
	return envelopeCase{name: name, msg: msg, kind: KindSubCancel, id: envNone, method: "", params: "",
		cancel: envNone, sub: sub}
}

func envInvalid(name, msg string) envelopeCase {
	return envelopeCase{name: name, msg: msg, kind: KindInvalid, id: envNone, method: envNone,
		params: envNone, cancel: envNone, sub: envNone}
}

func envParseErr(name, msg string) envelopeCase {
	c := envInvalid(name, msg)
	c.kind = KindParseError
	return c
}

func envOnWS(c envelopeCase) envelopeCase { c.ws = true; return c }
func envOnNDJSON(c envelopeCase) envelopeCase {
	c.ws = false
	return c
}

// envCheckField compares an Envelope slice with its expectation; "" means "any
// non-nil value" (used where the table does not care).
func envCheckField(t *testing.T, field string, got []byte, want string) {
	t.Helper()
	switch {
	case want == envNone && got != nil:
		t.Errorf("%s = %q, want nil", field, got)
	case want == envNone:
	case got == nil:
		t.Errorf("%s = nil, want %q", field, want)
	case want != "" && string(got) != want:
		t.Errorf("%s = %q, want %q", field, got, want)
	}
}

func TestClassify(t *testing.T) {
	const (
		echo   = `{"jsonrpc":"2.0","id":17,"method":"edge/echo","params":{"x":"0123456789abcdef"}}`
		cancl  = `{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":17}}`
		subc   = `{"jsonrpc":"2.0","method":"subscription/cancel","params":{"subscriptionId":"sub-1"}}`
		deep   = 9998 // arrays inside params: with the envelope and params objects, depth 10000
		jr     = `"jsonrpc":"2.0"`
		mEcho  = `"edge/echo"`
		mEchoM = `"method":"edge/echo"`
	)
	withID := func(id string) string { return `{` + jr + `,"id":` + id + `,` + mEchoM + `,"params":{}}` }
	tests := []envelopeCase{
		// Step 2: tracked requests and every id type.
		envTracked("tracked int id", echo, "17", IDInt, mEcho, `{"x":"0123456789abcdef"}`),
		envTracked("string id", withID(`"abc"`), `"abc"`, IDString, mEcho, `{}`),
		envTracked("escaped string id echoed raw", withID(`"a\u0062"`), `"a\u0062"`, IDString, mEcho, `{}`),
		envTracked("empty string id", withID(`""`), `""`, IDString, mEcho, `{}`),
		envTracked("negative id", withID(`-17`), `-17`, IDInt, mEcho, `{}`),
		envTracked("zero id", withID(`0`), `0`, IDInt, mEcho, `{}`),
		envTracked("negative zero id echoed raw", withID(`-0`), `-0`, IDInt, mEcho, `{}`),
		envTracked("id above 2^53 digit for digit", withID(`9007199254740993`), `9007199254740993`, IDInt, mEcho, `{}`),
		envTracked("max int64 id", withID(`9223372036854775807`), `9223372036854775807`, IDInt, mEcho, `{}`),
		envTracked("min int64 id", withID(`-9223372036854775808`), `-9223372036854775808`, IDInt, mEcho, `{}`),
		envInvalid("id above int64", withID(`9223372036854775808`)),
		envInvalid("id below int64", withID(`-9223372036854775809`)),
		envInvalid("id with 20 digits", withID(`10000000000000000000`)),
		envInvalid("float id 1.0", withID(`1.0`)),
		envInvalid("exponent id 1e2", withID(`1e2`)),
		envInvalid("exponent id 1E2", withID(`1E2`)),
		envInvalid("null id", withID(`null`)),
		envInvalid("true id", withID(`true`)),
		envInvalid("false id", withID(`false`)),
		envInvalid("object id", withID(`{}`)),
		envInvalid("array id", withID(`[1]`)),
		envTracked("params null", `{`+jr+`,"id":1,`+mEchoM+`,"params":null}`, "1", IDInt, mEcho, `null`),
		envTracked("params array", `{`+jr+`,"id":1,`+mEchoM+`,"params":[1,2]}`, "1", IDInt, mEcho, `[1,2]`),
		envTracked("params scalar", `{`+jr+`,"id":1,`+mEchoM+`,"params":"s"}`, "1", IDInt, mEcho, `"s"`),
		envTracked("jsonrpc 1.0 is still tracked", `{"jsonrpc":"1.0","id":1,`+mEchoM+`,"params":{}}`, "1", IDInt, mEcho, `{}`),
		envTracked("jsonrpc empty string is still tracked", `{"jsonrpc":"","id":1,`+mEchoM+`,"params":{}}`, "1", IDInt, mEcho, `{}`),
		envInvalid("jsonrpc number", `{"jsonrpc":2.0,"id":1,`+mEchoM+`,"params":{}}`),
		envInvalid("jsonrpc null", `{"jsonrpc":null,"id":1,`+mEchoM+`,"params":{}}`),
		envInvalid("jsonrpc missing", `{"id":1,`+mEchoM+`,"params":{}}`),
		envInvalid("method number", `{`+jr+`,"id":1,"method":1,"params":{}}`),
		envInvalid("method null", `{`+jr+`,"id":1,"method":null,"params":{}}`),
		envInvalid("method missing", `{`+jr+`,"id":1,"params":{}}`),
		envTracked("members in any order", `{"params":[],"method":"m","id":"x","jsonrpc":"2.0"}`, `"x"`, IDString, `"m"`, `[]`),
		envTracked("extra members ignored", `{"extra":[1,{"a":null}],`+jr+`,"id":1,`+mEchoM+`,"params":{},"z":0}`, "1", IDInt, mEcho, `{}`),
		envTracked("whitespace everywhere", " \t\r\n{ \"jsonrpc\" :\t\"2.0\" ,\n\"id\"\r: 5 , \"method\" : \"m\" , \"params\" : { \"a\" : [ 1 , 2 ] } } \r\n",
			"5", IDInt, `"m"`, `{ "a" : [ 1 , 2 ] }`),
		envTracked("escaped member names", `{"j\u0073onrpc":"2.0","\u0069d":1,"m\u0065thod":"x","p\u0061r\u0061ms":{}}`, "1", IDInt, `"x"`, `{}`),
		envTracked("escaped method kept raw", `{`+jr+`,"id":1,"method":"edge\/echo","params":{}}`, "1", IDInt, `"edge\/echo"`, `{}`),
		envInvalid("member names are case-sensitive", `{`+jr+`,"ID":1,`+mEchoM+`,"params":{}}`),
		envTracked("subscription/cancel with id is tracked", `{`+jr+`,"id":3,"method":"subscription/cancel","params":{"subscriptionId":"s"}}`,
			"3", IDInt, `"subscription/cancel"`, `{"subscriptionId":"s"}`),
		envTracked("deep params at depth 10000", `{`+jr+`,"id":1,"method":"m","params":{"a":`+strings.Repeat("[", deep)+strings.Repeat("]", deep)+`}}`,
			"1", IDInt, `"m"`, ""),
		envParseErr("params at depth 10001", `{`+jr+`,"id":1,"method":"m","params":{"a":`+strings.Repeat("[", deep+1)+strings.Repeat("]", deep+1)+`}}`),

		// Step 4: duplicates disqualify tracking; last one wins.
		envUntracked("duplicate id", `{`+jr+`,"id":1,`+mEchoM+`,"params":{},"id":2}`, "2", IDInt, mEcho, `{}`),
		envUntracked("duplicate id via escaped name", `{`+jr+`,"id":1,`+mEchoM+`,"params":{},"\u0069d":"x"}`, `"x"`, IDString, mEcho, `{}`),
		envUntracked("duplicate id same value", `{`+jr+`,"id":1,"id":1,`+mEchoM+`,"params":{}}`, "1", IDInt, mEcho, `{}`),
		envUntracked("duplicate id first invalid", `{`+jr+`,"id":null,"id":7,`+mEchoM+`,"params":{}}`, "7", IDInt, mEcho, `{}`),
		envInvalid("duplicate id last invalid", `{`+jr+`,"id":7,"id":null,`+mEchoM+`,"params":{}}`),
		envInvalid("duplicate id last float", `{`+jr+`,"id":7,"id":7.0,`+mEchoM+`,"params":{}}`),
		envUntracked("duplicate jsonrpc", `{`+jr+`,`+jr+`,"id":1,`+mEchoM+`,"params":{}}`, "1", IDInt, mEcho, `{}`),
		envUntracked("duplicate jsonrpc last 2.0", `{"jsonrpc":"1.0",`+jr+`,"id":1,`+mEchoM+`,"params":{}}`, "1", IDInt, mEcho, `{}`),
		envInvalid("duplicate jsonrpc last 1.0", `{`+jr+`,"jsonrpc":"1.0","id":1,`+mEchoM+`,"params":{}}`),
		envUntracked("escaped jsonrpc value 2.0 decoded", `{`+jr+`,"jsonrpc":"2\u002e0","id":1,`+mEchoM+`,"params":{}}`, "1", IDInt, mEcho, `{}`),
		envUntracked("duplicate method", `{`+jr+`,"id":1,"method":"a","method":"b","params":{}}`, "1", IDInt, `"b"`, `{}`),
		envInvalid("duplicate method last not string", `{`+jr+`,"id":1,"method":"a","method":1,"params":{}}`),
		envUntracked("duplicate params", `{`+jr+`,"id":1,`+mEchoM+`,"params":{},"params":[3]}`, "1", IDInt, mEcho, `[3]`),
		envUntracked("missing params", `{`+jr+`,"id":1,`+mEchoM+`}`, "1", IDInt, mEcho, envNone),
		envUntracked("missing params string id", `{`+jr+`,"id":"q",`+mEchoM+`}`, `"q"`, IDString, mEcho, envNone),
		envInvalid("missing params wrong jsonrpc", `{"jsonrpc":"1.0","id":1,`+mEchoM+`}`),
		envInvalid("missing params null id", `{`+jr+`,"id":null,`+mEchoM+`}`),

		// Step 1: $/cancelRequest on WebSocket.
		envCancel("cancel int", cancl, "17", IDInt),
		envCancel("cancel string", `{`+jr+`,"method":"$/cancelRequest","params":{"id":"a\u0062"}}`, `"a\u0062"`, IDString),
		envCancel("cancel negative zero", `{`+jr+`,"method":"$/cancelRequest","params":{"id":-0}}`, `-0`, IDInt),
		envCancel("cancel max int64", `{`+jr+`,"method":"$/cancelRequest","params":{"id":9223372036854775807}}`, `9223372036854775807`, IDInt),
		envCancel("cancel escaped inner key", `{`+jr+`,"method":"$/cancelRequest","params":{"\u0069d":1}}`, `1`, IDInt),
		envCancel("cancel escaped method", `{`+jr+`,"method":"$\/cancelRequest","params":{"id":1}}`, `1`, IDInt),
		envCancel("cancel any jsonrpc string", `{"jsonrpc":"1.0","method":"$/cancelRequest","params":{"id":1}}`, `1`, IDInt),
		envCancel("cancel ignores top-level id", `{`+jr+`,"id":9,"method":"$/cancelRequest","params":{"id":1}}`, `1`, IDInt),
		envCancel("cancel ignores other members", `{"x":[{}],`+jr+`,"method":"$/cancelRequest","params":{"id":1},"y":null}`, `1`, IDInt),
		envCancel("cancel whitespace", ` { "jsonrpc" : "2.0" , "method" : "$/cancelRequest" , "params" : { "id" : 1 } } `, `1`, IDInt),
		envOnNDJSON(envInvalid("cancel on NDJSON is ordinary", cancl)),
		envOnNDJSON(envTracked("cancel with id on NDJSON is tracked", `{`+jr+`,"id":9,"method":"$/cancelRequest","params":{"id":1}}`,
			"9", IDInt, `"$/cancelRequest"`, `{"id":1}`)),
		envOnWS(envInvalid("cancel id out of range", `{`+jr+`,"method":"$/cancelRequest","params":{"id":9223372036854775808}}`)),
		envOnWS(envInvalid("cancel id float", `{`+jr+`,"method":"$/cancelRequest","params":{"id":1.0}}`)),
		envOnWS(envInvalid("cancel id null", `{`+jr+`,"method":"$/cancelRequest","params":{"id":null}}`)),
		envOnWS(envInvalid("cancel id object", `{`+jr+`,"method":"$/cancelRequest","params":{"id":{}}}`)),
		envOnWS(envInvalid("cancel params extra member", `{`+jr+`,"method":"$/cancelRequest","params":{"id":1,"x":2}}`)),
		envOnWS(envInvalid("cancel params member before id", `{`+jr+`,"method":"$/cancelRequest","params":{"x":2,"id":1}}`)),
		envOnWS(envInvalid("cancel params duplicate id", `{`+jr+`,"method":"$/cancelRequest","params":{"id":1,"id":2}}`)),
		envOnWS(envInvalid("cancel params empty", `{`+jr+`,"method":"$/cancelRequest","params":{}}`)),
		envOnWS(envInvalid("cancel params array", `{`+jr+`,"method":"$/cancelRequest","params":[1]}`)),
		envOnWS(envInvalid("cancel params missing", `{`+jr+`,"method":"$/cancelRequest"}`)),
		envOnWS(envInvalid("cancel duplicate params", `{`+jr+`,"method":"$/cancelRequest","params":{"id":1},"params":{"id":1}}`)),
		envOnWS(envInvalid("cancel duplicate method", `{`+jr+`,"method":"$/cancelRequest","method":"$/cancelRequest","params":{"id":1}}`)),
		envOnWS(envInvalid("cancel duplicate jsonrpc", `{`+jr+`,`+jr+`,"method":"$/cancelRequest","params":{"id":1}}`)),
		envOnWS(envInvalid("cancel jsonrpc number", `{"jsonrpc":2,"method":"$/cancelRequest","params":{"id":1}}`)),
		envOnWS(envInvalid("cancel jsonrpc missing", `{"method":"$/cancelRequest","params":{"id":1}}`)),
		envOnWS(envInvalid("cancel method case", `{`+jr+`,"method":"$/CancelRequest","params":{"id":1}}`)),
		envOnWS(envTracked("cancel-shaped with invalid inner id and top-level id", `{`+jr+`,"id":2,"method":"$/cancelRequest","params":{"id":null}}`,
			"2", IDInt, `"$/cancelRequest"`, `{"id":null}`)),

		// Step 3: subscription/cancel on both bindings.
		envSubCancel("sub cancel", subc, `"sub-1"`),
		envOnWS(envSubCancel("sub cancel on ws", subc, `"sub-1"`)),
		envSubCancel("sub cancel escaped", `{"jsonrpc":"1.0","method":"subscription\/cancel","params":{"subscription\u0049d":"s\u0031"}}`, `"s\u0031"`),
		envSubCancel("sub cancel extra top-level member", `{`+jr+`,"x":1,"method":"subscription/cancel","params":{"subscriptionId":""}}`, `""`),
		envInvalid("sub cancel id null", `{`+jr+`,"id":null,"method":"subscription/cancel","params":{"subscriptionId":"s"}}`),
		envUntracked("sub cancel duplicate id", `{`+jr+`,"id":1,"id":2,"method":"subscription/cancel","params":{"subscriptionId":"s"}}`,
			"2", IDInt, `"subscription/cancel"`, `{"subscriptionId":"s"}`),
		envInvalid("sub cancel number", `{`+jr+`,"method":"subscription/cancel","params":{"subscriptionId":1}}`),
		envInvalid("sub cancel extra param", `{`+jr+`,"method":"subscription/cancel","params":{"subscriptionId":"s","x":1}}`),
		envInvalid("sub cancel duplicate param", `{`+jr+`,"method":"subscription/cancel","params":{"subscriptionId":"s","subscriptionId":"t"}}`),
		envInvalid("sub cancel empty params", `{`+jr+`,"method":"subscription/cancel","params":{}}`),
		envInvalid("sub cancel params array", `{`+jr+`,"method":"subscription/cancel","params":["s"]}`),
		envInvalid("sub cancel duplicate params", `{`+jr+`,"method":"subscription/cancel","params":{"subscriptionId":"s"},"params":{"subscriptionId":"s"}}`),
		envInvalid("sub cancel duplicate method", `{`+jr+`,"method":"subscription/cancel","method":"subscription/cancel","params":{"subscriptionId":"s"}}`),
		envInvalid("sub cancel jsonrpc number", `{"jsonrpc":2,"method":"subscription/cancel","params":{"subscriptionId":"s"}}`),
		envInvalid("sub cancel wrong key", `{`+jr+`,"method":"subscription/cancel","params":{"subscriptionid":"s"}}`),

		// Step 4 failures that are valid JSON.
		envInvalid("empty object", `{}`),
		envInvalid("empty batch", `[]`),
		envInvalid("batch of one request", `[`+echo+`]`),
		envInvalid("scalar number", `1`),
		envInvalid("scalar string", `"x"`),
		envInvalid("scalar null", ` null `),
		envInvalid("notification", `{`+jr+`,"method":"x","params":{}}`),
		envInvalid("deep array top level at 10000", strings.Repeat("[", 10000)+strings.Repeat("]", 10000)),

		// Not JSON at all.
		envParseErr("empty", ``),
		envParseErr("whitespace", " \r\n\t"),
		envParseErr("unclosed object", `{`),
		envParseErr("trailing comma", `{`+jr+`,"id":1,`+mEchoM+`,"params":{},}`),
		envParseErr("trailing garbage", echo+` x`),
		envParseErr("two objects", echo+echo),
		envParseErr("leading zero in params", `{`+jr+`,"id":1,`+mEchoM+`,"params":{"a":01}}`),
		envParseErr("leading zero id", withID(`017`)),
		envParseErr("bad escape in id", withID(`"\x"`)),
		envParseErr("bad escape in key", `{"\q":1}`),
		envParseErr("control char in method", "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"a\tb\",\"params\":{}}"),
		envParseErr("invalid utf8 in id", "{\"jsonrpc\":\"2.0\",\"id\":\"\xff\",\"method\":\"m\",\"params\":{}}"),
		envParseErr("invalid utf8 in key", "{\"\xc3\":1}"),
		envParseErr("invalid utf8 outside strings", "{\"a\":1}\xff"),
		envParseErr("BOM", "\xef\xbb\xbf"+echo),
		envParseErr("missing colon", `{"id" 1}`),
		envParseErr("missing value", `{"id":}`),
		envParseErr("unquoted key", `{id:1}`),
		envParseErr("bad literal", `{"id":nul}`),
		envParseErr("trailing comma in batch", `[1,]`),
		envParseErr("deep array top level at 10001", strings.Repeat("[", 10001)+strings.Repeat("]", 10001)),
		envParseErr("deep unclosed", strings.Repeat(`{"a":`, 30000)),
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := Classify([]byte(tt.msg), tt.ws)
			if e.Kind != tt.kind {
				t.Fatalf("Kind = %v, want %v", e.Kind, tt.kind)
			}
			if tt.kind != KindSubCancel && e.IDKind != tt.idKind {
				t.Errorf("IDKind = %v, want %v", e.IDKind, tt.idKind)
			}
			envCheckField(t, "ID", e.ID, tt.id)
			envCheckField(t, "Method", e.Method, tt.method)
			envCheckField(t, "Params", e.Params, tt.params)
			envCheckField(t, "CancelID", e.CancelID, tt.cancel)
			envCheckField(t, "SubscriptionID", e.SubscriptionID, tt.sub)
			if want := refClassify([]byte(tt.msg), tt.ws); !envelopesEqual(e, want) {
				t.Errorf("reference classifier disagrees:\n got  %s\n want %s", envString(e), envString(want))
			}
		})
	}
}

func TestEnvelopeJSONRPCIs20(t *testing.T) {
	tests := []struct {
		name string
		tok  string
		want bool
	}{
		{"plain", `"2.0"`, true},
		{"escaped", `"\u0032.\u0030"`, true},
		{"escaped slash is not it", `"2\/0"`, false},
		{"1.0", `"1.0"`, false},
		{"2.00", `"2.00"`, false},
		{"prefix", `"2."`, false},
		{"number", `2.0`, false},
		{"empty", `""`, false},
		{"nil", envNone, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var e Envelope
			if tt.tok != envNone {
				e.JSONRPC = []byte(tt.tok)
			}
			if got := e.JSONRPCIs20(); got != tt.want {
				t.Errorf("JSONRPCIs20(%s) = %v, want %v", tt.tok, got, tt.want)
			}
		})
	}
}

func TestEnvelopeMethodName(t *testing.T) {
	tests := []struct {
		name, msg, want string
		aliases         bool
	}{
		{"plain aliases", `{"jsonrpc":"2.0","id":1,"method":"edge/echo","params":{}}`, "edge/echo", true},
		{"escaped decoded", `{"jsonrpc":"2.0","id":1,"method":"edge\/ech\u006f","params":{}}`, "edge/echo", false},
		{"none", `[]`, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msg := []byte(tt.msg)
			e := Classify(msg, false)
			scratch := make([]byte, 0, 64)
			got := e.MethodName(scratch)
			if string(got) != tt.want {
				t.Fatalf("MethodName = %q, want %q", got, tt.want)
			}
			if got != nil && sliceWithin(msg, got) != tt.aliases {
				t.Errorf("MethodName aliases msg = %v, want %v", !tt.aliases, tt.aliases)
			}
		})
	}
}

func TestIDKey(t *testing.T) {
	tests := []struct {
		name string
		kind IDKind
		tok  string
		want string
	}{
		{"int", IDInt, `17`, "i17"},
		{"negative", IDInt, `-17`, "i-17"},
		{"zero", IDInt, `0`, "i0"},
		{"negative zero is zero", IDInt, `-0`, "i0"},
		{"big", IDInt, `9007199254740993`, "i9007199254740993"},
		{"string", IDString, `"1"`, "s1"},
		{"escaped string", IDString, `"\u0061"`, "sa"},
		{"empty string", IDString, `""`, "s"},
		{"none", IDNone, `null`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := IDKey([]byte("k:"), tt.kind, []byte(tt.tok))
			if string(got) != "k:"+tt.want {
				t.Errorf("IDKey(%v, %s) = %q, want %q", tt.kind, tt.tok, got, "k:"+tt.want)
			}
		})
	}
	// The contract's identity rules, pairwise.
	same := func(k1 IDKind, t1 string, k2 IDKind, t2 string) bool {
		return string(IDKey(nil, k1, []byte(t1))) == string(IDKey(nil, k2, []byte(t2)))
	}
	if same(IDInt, "1", IDString, `"1"`) {
		t.Error(`1 and "1" have the same key`)
	}
	// Lone surrogates are neither U+FFFD nor each other (WTF-8 keys); a
	// valid pair is the character it encodes.
	distinct := []string{`"\ud800"`, `"\udfff"`, `"\ufffd"`, `"\udc00\ud800"`, `"\ufffd\ufffd"`, `"\ud800\udc00x"`, `"\ud800x"`}
	for i, a := range distinct {
		for _, b := range distinct[i+1:] {
			if same(IDString, a, IDString, b) {
				t.Errorf("%s and %s have the same key", a, b)
			}
		}
	}
	if !same(IDString, `"\ufffd"`, IDString, "\"\uFFFD\"") || !same(IDString, `"\ud800\udc00"`, IDString, "\"\U00010000\"") {
		t.Error("a character escaped and raw have different keys")
	}
	if !same(IDString, `"a"`, IDString, `"\u0061"`) {
		t.Error(`"a" and "\u0061" have different keys`)
	}
	if same(IDString, `"a"`, IDString, `"b"`) {
		t.Error(`"a" and "b" have the same key`)
	}
}

// seedGoldenPair is one request line and the exact response line after it.
type seedGoldenPair struct {
	file          string
	request, resp []byte
}

// readSeedGoldens reads the request/response pairs of the protocol goldens in
// ../../shared/seed-fixtures/goldens (not copied into the repository).
func readSeedGoldens(t *testing.T) []seedGoldenPair {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "..", "shared", "seed-fixtures", "goldens", "*.ndjson"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no goldens found (err %v)", err)
	}
	var pairs []seedGoldenPair
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var lines [][]byte
		sc := bufio.NewScanner(bytes.NewReader(data))
		for sc.Scan() {
			if l := bytes.TrimSuffix(sc.Bytes(), []byte("\r")); len(l) > 0 {
				lines = append(lines, bytes.Clone(l))
			}
		}
		if len(lines)%2 != 0 {
			t.Fatalf("%s: odd number of lines", f)
		}
		for i := 0; i < len(lines); i += 2 {
			pairs = append(pairs, seedGoldenPair{strings.TrimSuffix(filepath.Base(f), ".ndjson"), lines[i], lines[i+1]})
		}
	}
	return pairs
}

// TestClassifyGoldens classifies the request line of every golden.
//
// malformed-request.ndjson ({"jsonrpc":"1.0","id":6,...}) has jsonrpc, id,
// method and params once each, so CONTRACT.md section 2.2 makes it a tracked
// request whose jsonrpc is not "2.0"; the session answers it with the golden's
// id-null Invalid Request after admission. So it is KindTracked with
// JSONRPCIs20 false here, not KindInvalid.
func TestClassifyGoldens(t *testing.T) {
	for _, p := range readSeedGoldens(t) {
		t.Run(p.file, func(t *testing.T) {
			for _, ws := range []bool{false, true} {
				e := Classify(p.request, ws)
				wantKind, want20 := KindTracked, true
				switch p.file {
				case "rejected-batch":
					wantKind = KindInvalid
				case "malformed-request":
					want20 = false
				}
				if e.Kind != wantKind {
					t.Fatalf("ws=%v: Kind = %v, want %v", ws, e.Kind, wantKind)
				}
				if wantKind == KindTracked && e.JSONRPCIs20() != want20 {
					t.Errorf("ws=%v: JSONRPCIs20 = %v, want %v", ws, !want20, want20)
				}
			}
		})
	}
}

// refClassify is an independent model of CONTRACT.md section 2 built on
// encoding/json: json.Decoder tokens count the members, json.Unmarshal into
// map[string]json.RawMessage gives the last-wins decode.
func refClassify(msg []byte, ws bool) Envelope {
	if !jsonOracleValid(msg) {
		return Envelope{Kind: KindParseError}
	}
	members, ok := refMembers(msg)
	if !ok {
		return Envelope{Kind: KindInvalid}
	}
	var last map[string]json.RawMessage
	if err := json.Unmarshal(msg, &last); err != nil {
		panic("valid object does not decode: " + err.Error())
	}
	count := map[string]int{}
	for _, m := range members {
		count[m.key]++
	}
	jr, id, method, params := last["jsonrpc"], last["id"], last["method"], last["params"]
	isStr := func(raw json.RawMessage) bool { return len(raw) > 0 && raw[0] == '"' }
	str := func(raw json.RawMessage) string {
		var s string
		if !isStr(raw) || json.Unmarshal(raw, &s) != nil {
			return "\x00not a string"
		}
		return s
	}
	once := count["jsonrpc"] == 1 && isStr(jr) && count["method"] == 1 && isStr(method) && count["params"] == 1
	if ws && once && str(method) == "$/cancelRequest" {
		if pm, ok := refMembers(params); ok && len(pm) == 1 && pm[0].key == "id" {
			if k := refIDKind(pm[0].raw); k != IDNone {
				return Envelope{Kind: KindCancel, IDKind: k, CancelID: pm[0].raw, JSONRPC: jr, Method: method, Params: params}
			}
		}
	}
	idk := refIDKind(id)
	if once && count["id"] == 1 && idk != IDNone {
		return Envelope{Kind: KindTracked, ID: id, IDKind: idk, JSONRPC: jr, Method: method, Params: params}
	}
	if once && count["id"] == 0 && str(method) == "subscription/cancel" {
		if pm, ok := refMembers(params); ok && len(pm) == 1 && pm[0].key == "subscriptionId" && isStr(pm[0].raw) {
			return Envelope{Kind: KindSubCancel, SubscriptionID: pm[0].raw, JSONRPC: jr, Method: method, Params: params}
		}
	}
	if str(jr) == "2.0" && isStr(method) && idk != IDNone {
		return Envelope{Kind: KindUntracked, ID: id, IDKind: idk, JSONRPC: jr, Method: method, Params: params}
	}
	return Envelope{Kind: KindInvalid}
}

type refMember struct {
	key string
	raw json.RawMessage
}

// refMembers lists the members of a JSON object in order, duplicates included;
// false if raw is not an object.
func refMembers(raw []byte) ([]refMember, bool) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, false
	}
	var ms []refMember
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, false
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, false
		}
		ms = append(ms, refMember{tok.(string), v})
	}
	return ms, true
}

// refIDKind types an id the way a typed decoder would: a string, or something
// that decodes into an int64 (json.Unmarshal rejects fractions, exponents and
// out-of-range numbers there; null must be excluded because it decodes to a
// no-op).
func refIDKind(raw json.RawMessage) IDKind {
	if len(raw) == 0 || string(raw) == "null" {
		return IDNone
	}
	if raw[0] == '"' {
		return IDString
	}
	var n int64
	if json.Unmarshal(raw, &n) == nil {
		return IDInt
	}
	return IDNone
}

// refIDKey is IDKey's model: the decoded string (lone surrogates in WTF-8)
// or the parsed integer.
func refIDKey(kind IDKind, tok []byte) string {
	switch kind {
	case IDString:
		return "s" + refWTF8(refUTF16(tok))
	case IDInt:
		n, err := strconv.ParseInt(string(tok), 10, 64)
		if err != nil {
			panic(err)
		}
		return "i" + strconv.FormatInt(n, 10)
	}
	return ""
}

// refUTF16 returns the UTF-16 code units a valid JSON string token denotes,
// lone surrogate escapes included: the identity of a string id.
func refUTF16(tok []byte) []uint16 {
	in := string(tok[1 : len(tok)-1])
	var u []uint16
	for len(in) > 0 {
		if in[0] != '\\' {
			r, n := utf8.DecodeRuneInString(in)
			u = utf16.AppendRune(u, r)
			in = in[n:]
			continue
		}
		if in[1] == 'u' {
			v, err := strconv.ParseUint(in[2:6], 16, 16)
			if err != nil {
				panic(err)
			}
			u = append(u, uint16(v))
			in = in[6:]
			continue
		}
		c, _, _, err := strconv.UnquoteChar(in, '"')
		if err != nil {
			panic(err)
		}
		u = append(u, uint16(c))
		in = in[2:]
	}
	return u
}

// refWTF8 encodes UTF-16 code units as WTF-8: pairs as their character, lone
// surrogates as the three bytes UTF-8 would give them if it allowed them.
func refWTF8(u []uint16) string {
	var b []byte
	for i := 0; i < len(u); i++ {
		r := rune(u[i])
		if i+1 < len(u) && utf16.IsSurrogate(r) {
			if d := utf16.DecodeRune(r, rune(u[i+1])); d != utf8.RuneError {
				b = utf8.AppendRune(b, d)
				i++
				continue
			}
		}
		if utf16.IsSurrogate(r) {
			b = append(b, byte(0xE0|r>>12), byte(0x80|(r>>6)&0x3F), byte(0x80|r&0x3F))
			continue
		}
		b = utf8.AppendRune(b, r)
	}
	return string(b)
}

func envelopesEqual(a, b Envelope) bool {
	eq := func(x, y []byte) bool { return (x == nil) == (y == nil) && bytes.Equal(x, y) }
	return a.Kind == b.Kind && a.IDKind == b.IDKind && eq(a.ID, b.ID) && eq(a.JSONRPC, b.JSONRPC) &&
		eq(a.Method, b.Method) && eq(a.Params, b.Params) && eq(a.CancelID, b.CancelID) &&
		eq(a.SubscriptionID, b.SubscriptionID)
}

func envString(e Envelope) string {
	q := func(b []byte) string {
		if b == nil {
			return "nil"
		}
		return strconv.Quote(string(b))
	}
	return e.Kind.String() + " id=" + q(e.ID) + "/" + e.IDKind.String() + " jsonrpc=" + q(e.JSONRPC) +
		" method=" + q(e.Method) + " params=" + q(e.Params) + " cancel=" + q(e.CancelID) + " sub=" + q(e.SubscriptionID)
}

// sliceWithin reports whether s lies inside msg's backing array (s aliases msg).
func sliceWithin(msg, s []byte) bool {
	if len(s) == 0 {
		return false
	}
	base := uintptr(unsafe.Pointer(unsafe.SliceData(msg)))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(s)))
	return p >= base && p+uintptr(len(s)) <= base+uintptr(len(msg))
}

// checkClassify is the per-input property shared by the rapid test and the
// fuzz target: deterministic, aliasing, agreeing with refClassify, and IDKey
// agreeing with refIDKey.
func checkClassify(t interface{ Fatalf(string, ...any) }, msg []byte) {
	for _, ws := range []bool{false, true} {
		e := Classify(msg, ws)
		if again := Classify(msg, ws); !envelopesEqual(e, again) {
			t.Fatalf("ws=%v: Classify(%q) not deterministic: %s then %s", ws, msg, envString(e), envString(again))
		}
		for _, s := range [][]byte{e.ID, e.JSONRPC, e.Method, e.Params, e.CancelID, e.SubscriptionID} {
			if s != nil && !sliceWithin(msg, s) {
				t.Fatalf("ws=%v: Classify(%q) returned %q, which does not alias msg", ws, msg, s)
			}
		}
		if want := refClassify(msg, ws); !envelopesEqual(e, want) {
			t.Fatalf("ws=%v: Classify(%q)\n got  %s\n want %s", ws, msg, envString(e), envString(want))
		}
		if e.Kind == KindParseError && ValidJSON(msg) || e.Kind != KindParseError && !ValidJSON(msg) {
			t.Fatalf("ws=%v: Classify(%q) = %v disagrees with ValidJSON", ws, msg, e.Kind)
		}
		idTok := e.ID
		if e.Kind == KindCancel {
			idTok = e.CancelID
		}
		if e.IDKind != IDNone {
			if got, want := string(IDKey(nil, e.IDKind, idTok)), refIDKey(e.IDKind, idTok); got != want {
				t.Fatalf("IDKey(%v, %s) = %q, want %q", e.IDKind, idTok, got, want)
			}
		}
	}
}

// envelopeGen generates request-like messages: the four members in random
// order, spelled plainly or with escapes, duplicated or missing, with values
// of every relevant type, random extra members and whitespace, sometimes
// wrapped in a batch or replaced by a scalar.
func envelopeGen() *rapid.Generator[string] {
	ws := rapid.SampledFrom([]string{"", "", "", " ", "\n\t", " \r\n "})
	keys := map[string][]string{
		"jsonrpc": {`"jsonrpc"`, `"j\u0073onrpc"`},
		"id":      {`"id"`, `"\u0069d"`, `"i\u0064"`},
		"method":  {`"method"`, `"m\u0065thod"`},
		"params":  {`"params"`, `"p\u0061rams"`},
		"other":   {`"x"`, `"ID"`, `"Id"`, `"idd"`, `"subscriptionId"`, `""`},
	}
	values := map[string][]string{
		"jsonrpc": {`"2.0"`, `"2.0"`, `"2\u002e0"`, `"1.0"`, `""`, `2.0`, `null`},
		"id": {`1`, `-17`, `0`, `-0`, `"a"`, `"\u0061"`, `""`, `9007199254740993`, `9223372036854775807`,
			`-9223372036854775808`, `9223372036854775808`, `-9223372036854775809`, `1.0`, `1e2`,
			`null`, `true`, `{}`, `[]`, `"1"`, `"\ud800"`, `"\udfff"`, `"\ufffd"`, "\"\uFFFD\"",
			`"\ud800\udc00"`, `"\udc00\ud800"`},
		"method": {`"edge/echo"`, `"$/cancelRequest"`, `"$\/cancelRequest"`, `"subscription/cancel"`,
			`"subscription\/cancel"`, `1`, `null`, `""`},
		"params": {`{}`, `{"id":1}`, `{"id":"x"}`, `{"\u0069d":-0}`, `{"id":1,"id":2}`, `{"id":null}`,
			`{"id":1.5}`, `{"id":1,"x":0}`, `{"subscriptionId":"s"}`, `{"subscription\u0049d":"s"}`,
			`{"subscriptionId":1}`, `{"subscriptionId":"s","x":1}`, `{ "subscriptionId" : "s" }`, `[]`,
			`[1]`, `null`, `"p"`, `{"a":[{"b":null}]}`},
		"other": {`1`, `"x"`, `null`, `[]`, `{"id":1}`},
	}
	names := []string{"jsonrpc", "id", "method", "params", "other"}
	return rapid.Custom(func(t *rapid.T) string {
		var parts []string
		for _, name := range names {
			n := rapid.SampledFrom([]int{0, 1, 1, 1, 1, 2}).Draw(t, name+" count")
			if name == "other" {
				n = rapid.IntRange(0, 2).Draw(t, "others")
			}
			for range n {
				k := rapid.SampledFrom(keys[name]).Draw(t, name+" key")
				v := rapid.SampledFrom(values[name]).Draw(t, name+" value")
				parts = append(parts, ws.Draw(t, "ws")+k+ws.Draw(t, "ws")+":"+ws.Draw(t, "ws")+v+ws.Draw(t, "ws"))
			}
		}
		perm := rapid.Permutation(parts).Draw(t, "order")
		obj := "{" + strings.Join(perm, ",") + ws.Draw(t, "ws") + "}"
		switch rapid.IntRange(0, 9).Draw(t, "shape") {
		case 0:
			obj = "[" + obj + "]"
		case 1:
			obj = rapid.SampledFrom([]string{`1`, `"s"`, `null`, `[]`, `true`}).Draw(t, "scalar")
		}
		return ws.Draw(t, "ws") + obj + ws.Draw(t, "ws")
	})
}

// TestClassifyDifferential checks Classify against refClassify on generated
// envelopes, some of them mutated into invalid JSON.
func TestClassifyDifferential(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		checkClassify(t, []byte(jsonMutate(t, envelopeGen().Draw(t, "msg"))))
	})
}

// TestClassifyDifferentialJSON does the same on generic JSON values, so odd
// member values and nesting reach Classify too.
func TestClassifyDifferentialJSON(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		checkClassify(t, []byte(jsonMutate(t, jsonGen(4).Draw(t, "json"))))
	})
}

// FuzzClassify must never panic; Classify must be deterministic, return slices
// aliasing msg, and agree with refClassify and ValidJSON.
func FuzzClassify(f *testing.F) {
	seeds := []string{
		`{"jsonrpc":"2.0","id":17,"method":"edge/echo","params":{"x":"0123456789abcdef"}}`,
		`{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":"a\u0062"}}`,
		`{"jsonrpc":"2.0","id":"\udc00\ud800x\ud83d\ude00","method":"m","params":{}}`,
		`{"jsonrpc":"2.0","method":"subscription/cancel","params":{"subscriptionId":"sub-1"}}`,
		`{"jsonrpc":"2.0","id":1,"id":2,"method":"m"}`,
		`{"\u0069d":-0,"jsonrpc":"2.0","method":"m","params":null}`,
		`{"jsonrpc":"2.0","id":9223372036854775808,"method":"m","params":{}}`,
		`[{"jsonrpc":"2.0","id":1,"method":"m","params":{}}]`,
		`[]`, `1`, ``, `{`, "\"\xff\"", `{"a":[1,]}`,
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, msg []byte) {
		checkClassify(t, msg)
	})
}

// TestClassifyValidUTF8Only guards the oracle's assumption that json.Valid
// accepts invalid UTF-8 inside strings; if encoding/json ever changes, the
// jsonOracleValid adjustment must be revisited.
func TestClassifyValidUTF8Only(t *testing.T) {
	in := []byte("\"\xff\"")
	if !json.Valid(in) || utf8.Valid(in) {
		t.Fatalf("encoding/json.Valid(%q) = %v; oracle assumption changed", in, json.Valid(in))
	}
	if got := Classify(in, false).Kind; got != KindParseError {
		t.Fatalf("Classify(%q) = %v, want ParseError", in, got)
	}
}

var classifySink Envelope

func BenchmarkClassify(b *testing.B) {
	big := `{"jsonrpc":"2.0","id":"req-1024","method":"edge/echo","params":{"data":"` +
		strings.Repeat("0123456789abcdef", 60) + `","n":[1,2,3,4.5e6],"ok":true,"nested":{"a":null}}}`
	for len(big) < 1024 {
		big = strings.Replace(big, `"ok":true`, `"ok":true,"pad":"xxxxxxxx"`, 1)
	}
	benches := []struct {
		name string
		msg  string
		ws   bool
		kind Kind
	}{
		{"tracked", `{"jsonrpc":"2.0","id":17,"method":"edge/echo","params":{"x":"0123456789abcdef"}}`, true, KindTracked},
		// echo is the pipelined echo request of the load generator.
		{"echo", `{"jsonrpc":"2.0","id":1234,"method":"edge/echo","params":{"p":"0123456789ab"}}`, true, KindTracked},
		{"stringID", `{"jsonrpc":"2.0","id":"req-1234","method":"edge/echo","params":{"p":"0123456789ab"}}`, true, KindTracked},
		{"spaced", `{"jsonrpc": "2.0", "id": 1234, "method": "edge/echo", "params": {"p": "0123456789ab"}}`, true, KindTracked},
		{"cancel", `{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":17}}`, true, KindCancel},
		{"subcancel", `{"jsonrpc":"2.0","method":"subscription/cancel","params":{"subscriptionId":"sub-1"}}`, true, KindSubCancel},
		{"params1KiB", big, true, KindTracked},
	}
	for _, bb := range benches {
		b.Run(bb.name, func(b *testing.B) {
			msg := []byte(bb.msg)
			if k := Classify(msg, bb.ws).Kind; k != bb.kind {
				b.Fatalf("Kind = %v, want %v", k, bb.kind)
			}
			b.ReportAllocs()
			b.SetBytes(int64(len(msg)))
			for b.Loop() {
				classifySink = Classify(msg, bb.ws)
			}
		})
	}
}

// TestIDKeyInjective checks that two string ids have the same key exactly
// when their JSON texts denote the same UTF-16 code units (CONTRACT.md
// section 2), on strings made of the pieces that used to collide: lone
// surrogates, U+FFFD and pairs, each spelled raw or escaped.
func TestIDKeyInjective(t *testing.T) {
	pieces := []string{`a`, `\u0061`, `\ud800`, `\udbff`, `\udc00`, `\udfff`, `\ufffd`, "\uFFFD",
		`\ud800\udc00`, "\U00010000", `\n`, "\u00e9", `\u00e9`, `\"`}
	tok := rapid.Custom(func(t *rapid.T) string {
		return `"` + strings.Join(rapid.SliceOfN(rapid.SampledFrom(pieces), 0, 4).Draw(t, "pieces"), "") + `"`
	})
	rapid.Check(t, func(t *rapid.T) {
		a, b := tok.Draw(t, "a"), tok.Draw(t, "b")
		ka, kb := string(IDKey(nil, IDString, []byte(a))), string(IDKey(nil, IDString, []byte(b)))
		if ka != refIDKey(IDString, []byte(a)) {
			t.Fatalf("IDKey(%s) = %q, want %q", a, ka, refIDKey(IDString, []byte(a)))
		}
		if same := slices.Equal(refUTF16([]byte(a)), refUTF16([]byte(b))); (ka == kb) != same {
			t.Fatalf("%s and %s: keys %q and %q, same string %v", a, b, ka, kb, same)
		}
	})
}

func BenchmarkIDKey(b *testing.B) {
	benches := []struct {
		name string
		kind IDKind
		tok  string
	}{
		{"int", IDInt, `9007199254740993`},
		{"string", IDString, `"req-0123456789"`},
		{"escaped", IDString, `"req-\u0030123456789"`},
		{"lone surrogate", IDString, `"req-\ud800123456789"`},
	}
	for _, bb := range benches {
		b.Run(bb.name, func(b *testing.B) {
			tok := []byte(bb.tok)
			buf := make([]byte, 0, 64)
			b.ReportAllocs()
			b.SetBytes(int64(len(tok)))
			for b.Loop() {
				buf = IDKey(buf[:0], bb.kind, tok)
			}
		})
	}
}
