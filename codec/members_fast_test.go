package codec

import (
	"bytes"
	"path/filepath"
	"testing"

	"pgregory.net/rapid"
)

// answerSeeds are answers of or near scanCanonicalAnswer's shape.
func answerSeeds() []string {
	var out []string
	for _, id := range seedIDs {
		for _, v := range seedParams {
			for _, tail := range seedTails {
				out = append(out,
					`{"jsonrpc":"2.0","id":`+id+`,"result":`+v+`}`+tail,
					`{"jsonrpc":"2.0","id":`+id+`,"error":`+v+`}`+tail)
			}
		}
	}
	return append(out,
		`{"jsonrpc":"2.0","id":1,"result":1,"result":2}`, // repeated: the general path's last one
		`{"jsonrpc":"2.0","id":1,"result":{}} x`,
		`{"jsonrpc":"2.0","id":1,"result":}`,
		`{"jsonrpc":"2.0","id":1,"result":{"a":1}`,
		`{"jsonrpc":"2.0","id":01,"result":1}`,
		`{"jsonrpc":"2.0","id":1.5,"result":1}`,
		`{"jsonrpc":"2.0","id":"a\"b","result":1}`,
		`{"jsonrpc":"2.0","id":1,"result":[1,2,{"x":"\u00e9"}]}`,
		`{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}`,
		`{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"m","data":{"code":"X"}}}`+"\r\n",
	)
}

// checkAnswerFastPath: for any input, ParseMessage (with its fast path) must
// return exactly what the general path returns, every slice at the same
// position.
func checkAnswerFastPath(t interface {
	Helper()
	Fatalf(string, ...any)
}, msg []byte) {
	t.Helper()
	got, gok := ParseMessage(msg)
	want, wok := parseMessageGeneral(msg)
	if gok != wok {
		t.Fatalf("%q: ParseMessage ok %v, general %v", msg, gok, wok)
	}
	if !gok {
		return
	}
	for i, p := range [][2][]byte{{got.ID, want.ID}, {got.Method, want.Method}, {got.Params, want.Params},
		{got.Result, want.Result}, {got.Error, want.Error}} {
		if !bytes.Equal(p[0], p[1]) || len(p[0]) > 0 && &p[0][0] != &p[1][0] {
			t.Fatalf("%q: member %d is %q, general path %q", msg, i, p[0], p[1])
		}
	}
}

// FuzzParseMessageFastPath: see checkAnswerFastPath. Seeded with the
// answer seeds and FuzzClassify's corpus.
func FuzzParseMessageFastPath(f *testing.F) {
	for _, msg := range readFuzzCorpus(f, filepath.Join("testdata", "fuzz", "FuzzClassify")) {
		f.Add(msg)
	}
	for _, s := range answerSeeds() {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, msg []byte) { checkAnswerFastPath(t, msg) })
}

// TestParseMessageFastPathSeeds runs the seeds in every test run and checks
// that the fast path takes the canonical ones.
func TestParseMessageFastPathSeeds(t *testing.T) {
	for _, s := range answerSeeds() {
		checkAnswerFastPath(t, []byte(s))
	}
	for _, s := range []string{`{"jsonrpc":"2.0","id":7,"result":{"p":"x"}}`, `{"jsonrpc":"2.0","id":"a","error":{"code":1}}` + "\n"} {
		if _, ok := scanCanonicalAnswer([]byte(s)); !ok {
			t.Fatalf("%s: not taken by the fast path", s)
		}
	}
}

// TestParseMessageFastPathDifferential checks generated near-canonical
// answers against the general path.
func TestParseMessageFastPathDifferential(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		v := rapid.SampledFrom(seedParams).Draw(t, "value")
		if rapid.Bool().Draw(t, "generated value") {
			v = jsonGen(3).Draw(t, "json")
		}
		member := rapid.SampledFrom([]string{"result", "error"}).Draw(t, "member")
		msg := `{"jsonrpc":"2.0","id":` + rapid.SampledFrom(seedIDs).Draw(t, "id") + `,"` + member + `":` + v + `}` +
			rapid.SampledFrom(seedTails).Draw(t, "tail")
		checkAnswerFastPath(t, []byte(jsonMutate(t, msg)))
	})
}

func BenchmarkParseMessageAnswer(b *testing.B) {
	msg := []byte(`{"jsonrpc":"2.0","id":12345,"result":{"p":"0123456789ab"}}`)
	b.ReportAllocs()
	for b.Loop() {
		if m, ok := ParseMessage(msg); !ok || len(m.Result) == 0 {
			b.Fatal("not parsed")
		}
	}
}
