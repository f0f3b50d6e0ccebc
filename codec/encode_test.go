package codec

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"pgregory.net/rapid"
)

// TestEncodeErrorGoldens rebuilds the error response of every error golden
// with AppendError and compares bytes. The id comes from classifying the
// golden's request line, as the session would.
func TestEncodeErrorGoldens(t *testing.T) {
	tests := []struct {
		file     string
		pair     int // index among the file's request/response pairs
		code     Code
		message  string
		dataCode string
		details  string
	}{
		{"malformed-request", 0, CodeInvalidRequest, "Invalid Request", "", ""},
		{"rejected-batch", 0, CodeInvalidRequest, "Invalid Request", "", ""},
		{"unknown-method", 0, CodeMethodNotFound, "Method not found", "", ""},
		{"invalid-params", 0, CodeInvalidParams, "Invalid params", "", ""},
		{"incompatible-version", 0, CodeServerError, "Unsupported protocol version", "UNSUPPORTED_PROTOCOL_VERSION",
			`{"requestedProtocolVersion":"openengine.cluster/v0","supportedProtocolVersion":"openengine.cluster/v1"}`},
		{"admission-errors", 0, CodeInvalidParams, "Invalid params", "SCHEMA_VIOLATION",
			`{"reason":"dry-run apply must omit idempotencyKey"}`},
		{"admission-errors", 1, CodeServerError, "Idempotency key was reused with different parameters", "IDEMPOTENCY_REUSE", ""},
	}
	pairs := readSeedGoldens(t)
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			var p *seedGoldenPair
			n := 0
			for i := range pairs {
				if pairs[i].file == tt.file {
					if n == tt.pair {
						p = &pairs[i]
					}
					n++
				}
			}
			if p == nil {
				t.Fatalf("golden %s pair %d not found", tt.file, tt.pair)
			}
			e := Classify(p.request, false)
			var id []byte // id null for section 2.4 failures and a wrong jsonrpc
			if e.Kind == KindTracked && e.JSONRPCIs20() {
				id = e.ID
			}
			var details []byte
			if tt.details != "" {
				details = []byte(tt.details)
			}
			if msg := tt.code.Message(); msg != "" && msg != tt.message {
				t.Errorf("Code(%d).Message() = %q, want %q", tt.code, msg, tt.message)
			}
			got := AppendError(nil, id, tt.code, tt.message, tt.dataCode, details)
			if !bytes.Equal(got, p.resp) {
				t.Errorf("AppendError:\n got  %s\n want %s", got, p.resp)
			}
		})
	}
}

// TestEncodeResultGoldens rebuilds the success responses of the goldens with
// AppendResult from the request's id and the golden's result value.
func TestEncodeResultGoldens(t *testing.T) {
	for _, p := range readSeedGoldens(t) {
		var resp map[string]json.RawMessage
		if err := json.Unmarshal(p.resp, &resp); err != nil {
			t.Fatalf("%s: %v", p.file, err)
		}
		result, ok := resp["result"]
		if !ok {
			continue
		}
		t.Run(p.file, func(t *testing.T) {
			e := Classify(p.request, false)
			got := AppendResult(nil, e.ID, result)
			if !bytes.Equal(got, p.resp) {
				t.Errorf("AppendResult:\n got  %s\n want %s", got, p.resp)
			}
		})
	}
}

func TestEncodeAppend(t *testing.T) {
	tests := []struct {
		name string
		got  []byte
		want string
	}{
		{"result", AppendResult(nil, []byte(`9007199254740993`), []byte(`{"a":1}`)),
			`{"jsonrpc":"2.0","id":9007199254740993,"result":{"a":1}}`},
		{"result escaped id echoed raw", AppendResult(nil, []byte(`"a\u0062"`), []byte(`null`)),
			`{"jsonrpc":"2.0","id":"a\u0062","result":null}`},
		{"result nil is null", AppendResult(nil, []byte(`1`), nil), `{"jsonrpc":"2.0","id":1,"result":null}`},
		{"result empty is null", AppendResult(nil, []byte(`1`), []byte{}), `{"jsonrpc":"2.0","id":1,"result":null}`},
		{"result appends", AppendResult([]byte("x"), []byte(`1`), []byte(`2`)), `x{"jsonrpc":"2.0","id":1,"result":2}`},
		{"parse error", AppendError(nil, nil, CodeParseError, CodeParseError.Message(), "", nil),
			`{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}`},
		{"duplicate id", AppendError(nil, []byte(`"r"`), CodeInvalidRequest, "Invalid Request", "DUPLICATE_REQUEST_ID", nil),
			`{"jsonrpc":"2.0","id":"r","error":{"code":-32600,"message":"Invalid Request","data":{"code":"DUPLICATE_REQUEST_ID"}}}`},
		{"server busy", AppendError(nil, []byte(`3`), CodeServerError, "Server busy", "SERVER_BUSY", nil),
			`{"jsonrpc":"2.0","id":3,"error":{"code":-32000,"message":"Server busy","data":{"code":"SERVER_BUSY"}}}`},
		{"cancelled", AppendError(nil, []byte(`-0`), CodeRequestCancelled, CodeRequestCancelled.Message(), "", nil),
			`{"jsonrpc":"2.0","id":-0,"error":{"code":-32800,"message":"Request cancelled"}}`},
		{"internal", AppendError(nil, []byte(`1`), CodeInternalError, CodeInternalError.Message(), "PANIC", nil),
			`{"jsonrpc":"2.0","id":1,"error":{"code":-32603,"message":"Internal error","data":{"code":"PANIC"}}}`},
		{"details", AppendError(nil, []byte(`1`), CodeInvalidParams, "Invalid params", "SCHEMA_VIOLATION", []byte(`[1]`)),
			`{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"Invalid params","data":{"code":"SCHEMA_VIOLATION","details":[1]}}}`},
		{"details without data code dropped", AppendError(nil, []byte(`1`), CodeServerError, "m", "", []byte(`[1]`)),
			`{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"m"}}`},
		{"backend message escaped", AppendError(nil, []byte(`1`), CodeServerError, "say \"hi\"\n<&>\u2028\xff", "X\\Y", nil),
			`{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"say \"hi\"\n<&>\u2028\ufffd","data":{"code":"X\\Y"}}}`},
		{"other code", AppendError(nil, []byte(`1`), Code(7), "seven", "", nil),
			`{"jsonrpc":"2.0","id":1,"error":{"code":7,"message":"seven"}}`},
		{"notification", AppendNotification(nil, "subscription/closed", []byte(`{"subscriptionId":"s","reason":"done"}`)),
			`{"jsonrpc":"2.0","method":"subscription/closed","params":{"subscriptionId":"s","reason":"done"}}`},
		{"notification without params", AppendNotification(nil, "event", nil), `{"jsonrpc":"2.0","method":"event"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if string(tt.got) != tt.want {
				t.Errorf("got  %s\nwant %s", tt.got, tt.want)
			}
		})
	}
}

// jsonMarshalString is AppendQuote's reference: encoding/json with HTML
// escaping off.
func jsonMarshalString(s string) string {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		panic(err)
	}
	return strings.TrimSuffix(buf.String(), "\n")
}

func TestEncodeAppendQuote(t *testing.T) {
	tests := []struct{ name, in string }{
		{"empty", ""},
		{"ascii", "Server busy"},
		{"quote and backslash", `a"b\c`},
		{"short escapes", "\b\f\n\r\t"},
		{"other controls", "\x00\x01\x1f"},
		{"DEL", "\x7f"},
		{"html kept", "<a href='x'>&amp;</a>"},
		{"utf8", "é€😀"},
		{"line separators", "a\u2028b\u2029c"},
		{"invalid utf8", "a\xffb\xc3"},
		{"utf8 surrogate bytes", "\xed\xa0\x80"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := string(AppendQuote([]byte("x"), tt.in))
			if want := "x" + jsonMarshalString(tt.in); got != want {
				t.Errorf("AppendQuote(%q) = %s, want %s", tt.in, got, want)
			}
		})
	}
}

// checkAppendQuote: AppendQuote matches encoding/json, its output is a valid
// JSON string token, and it decodes back to s when s is valid UTF-8.
func checkAppendQuote(t interface{ Fatalf(string, ...any) }, s string) {
	got := AppendQuote(nil, s)
	if want := jsonMarshalString(s); string(got) != want {
		t.Fatalf("AppendQuote(%q) = %s, want %s", s, got, want)
	}
	back, ok := AppendUnquote(nil, got)
	if !ok {
		t.Fatalf("AppendQuote(%q) = %s is not a valid string token", s, got)
	}
	if utf8.ValidString(s) && string(back) != s {
		t.Fatalf("AppendQuote(%q) round-trips to %q", s, back)
	}
}

func TestEncodeAppendQuoteDifferential(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		checkAppendQuote(t, rapid.String().Draw(t, "s"))
		checkAppendQuote(t, string(rapid.SliceOf(rapid.Byte()).Draw(t, "bytes")))
	})
}

func FuzzAppendQuote(f *testing.F) {
	for _, s := range []string{"", "a\"b", "\x00\u2028", "\xff\xfe", "é"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) { checkAppendQuote(t, s) })
}

func BenchmarkAppendResult(b *testing.B) {
	id, result := []byte(`17`), []byte(`{"x":"0123456789abcdef"}`)
	buf := make([]byte, 0, 256)
	b.ReportAllocs()
	b.SetBytes(int64(len(AppendResult(nil, id, result))))
	for b.Loop() {
		buf = AppendResult(buf[:0], id, result)
	}
}

func BenchmarkAppendError(b *testing.B) {
	benches := []struct {
		name     string
		id       []byte
		code     Code
		message  string
		dataCode string
	}{
		{"invalid request", nil, CodeInvalidRequest, "Invalid Request", ""},
		{"duplicate id", []byte(`"req-17"`), CodeInvalidRequest, "Invalid Request", "DUPLICATE_REQUEST_ID"},
		{"backend message", []byte(`17`), CodeServerError, "Backend does not support \"plan\"", "INVALID_PHASE"},
	}
	for _, bb := range benches {
		b.Run(bb.name, func(b *testing.B) {
			buf := make([]byte, 0, 256)
			b.ReportAllocs()
			b.SetBytes(int64(len(AppendError(nil, bb.id, bb.code, bb.message, bb.dataCode, nil))))
			for b.Loop() {
				buf = AppendError(buf[:0], bb.id, bb.code, bb.message, bb.dataCode, nil)
			}
		})
	}
}

func BenchmarkAppendNotification(b *testing.B) {
	params := []byte(`{"subscriptionId":"s-1","cursor":"17","seq":17}`)
	buf := make([]byte, 0, 256)
	b.ReportAllocs()
	b.SetBytes(int64(len(AppendNotification(nil, "event", params))))
	for b.Loop() {
		buf = AppendNotification(buf[:0], "event", params)
	}
}

// TestPlainSubscriptionEncoding: the notifications of a plain JSON-RPC
// subscription (CONTRACT.md section 10) are valid JSON of the stated shape.
func TestPlainSubscriptionEncoding(t *testing.T) {
	head := PlainEventHead("eth")
	for _, tt := range []struct{ got, want string }{
		{string(AppendEventWith(nil, head, []byte(`"0x1"`), []byte(`"result":{"number":"0x1b4"}`))),
			`{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":"0x1","result":{"number":"0x1b4"}}}`},
		{string(AppendPlainError(nil, head, []byte(`"0x1"`), CodeServerError, "Slow consumer", "")),
			`{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":"0x1","error":{"code":-32000,"message":"Slow consumer"}}}`},
		{string(AppendPlainError(nil, head, []byte(`"0x2"`), CodeServerError, "Upstream lost", "UPSTREAM_LOST")),
			`{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":"0x2","error":{"code":-32000,"message":"Upstream lost","data":{"code":"UPSTREAM_LOST"}}}}`},
		{string(AppendEventWith(nil, PlainEventHead(`a"b`), []byte(`"s"`), nil)),
			`{"jsonrpc":"2.0","method":"a\"b_subscription","params":{"subscription":"s"}}`},
	} {
		if tt.got != tt.want {
			t.Errorf("got  %s\nwant %s", tt.got, tt.want)
		}
		if !json.Valid([]byte(tt.got)) {
			t.Errorf("not valid JSON: %s", tt.got)
		}
	}
}

// TestResultSize: ResultSize is the length of AppendResult's output, for
// ids and results of every kind, absent ones (written null) included.
func TestResultSize(t *testing.T) {
	tests := []struct {
		name       string
		id, result []byte
	}{
		{"int id object", []byte(`7`), []byte(`{"a":1}`)},
		{"string id", []byte(`"abc"`), []byte(`[1,2]`)},
		{"nil id", nil, []byte(`true`)},
		{"nil result", []byte(`1`), nil},
		{"empty both", []byte{}, []byte{}},
		{"long result", []byte(`12345678901234567890`), []byte(`"` + strings.Repeat("x", 70000) + `"`)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, want := ResultSize(tt.id, tt.result), len(AppendResult(nil, tt.id, tt.result)); got != want {
				t.Fatalf("ResultSize %d, AppendResult wrote %d", got, want)
			}
		})
	}
	rapid.Check(t, func(rt *rapid.T) {
		id := rapid.SliceOf(rapid.Byte()).Draw(rt, "id")
		result := rapid.SliceOf(rapid.Byte()).Draw(rt, "result")
		if got, want := ResultSize(id, result), len(AppendResult(nil, id, result)); got != want {
			rt.Fatalf("ResultSize %d, AppendResult wrote %d", got, want)
		}
	})
}
