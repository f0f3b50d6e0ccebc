package codec

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
)

func TestEachMember(t *testing.T) {
	tests := []struct {
		in   string
		ok   bool
		want []string // key=value pairs, raw
	}{
		{in: `{}`, ok: true},
		{in: ` { } `, ok: true},
		{in: `{"a":1}`, ok: true, want: []string{`"a"=1`}},
		{in: `{"a" : {"b":[1,2]} , "c":"x\"y"}`, ok: true, want: []string{`"a"={"b":[1,2]}`, `"c"="x\"y"`}},
		{in: `{"a":1,}`, ok: false, want: []string{`"a"=1`}},
		{in: `{"a":1`, ok: false, want: []string{`"a"=1`}},
		{in: `{"a"1}`, ok: false},
		{in: `{a:1}`, ok: false},
		{in: `[1]`, ok: false},
		{in: `{"a":1} x`, ok: false, want: []string{`"a"=1`}},
		{in: ``, ok: false},
	}
	for _, tt := range tests {
		var got []string
		ok := EachMember([]byte(tt.in), func(k, v []byte) bool {
			got = append(got, string(k)+"="+string(v))
			return true
		})
		if ok != tt.ok || strings.Join(got, ",") != strings.Join(tt.want, ",") {
			t.Errorf("EachMember(%q) = %v %q, want %v %q", tt.in, ok, got, tt.ok, tt.want)
		}
	}
}

func TestEachElement(t *testing.T) {
	tests := []struct {
		in   string
		ok   bool
		want []string
	}{
		{in: `[]`, ok: true},
		{in: ` [ 1 , {"a":[2]} ,"x"] `, ok: true, want: []string{`1`, `{"a":[2]}`, `"x"`}},
		{in: `[1,]`, ok: false, want: []string{`1`}},
		{in: `[1 2]`, ok: false, want: []string{`1`}},
		{in: `{}`, ok: false},
	}
	for _, tt := range tests {
		var got []string
		ok := EachElement([]byte(tt.in), func(e []byte) bool {
			got = append(got, string(e))
			return true
		})
		if ok != tt.ok || strings.Join(got, "|") != strings.Join(tt.want, "|") {
			t.Errorf("EachElement(%q) = %v %q, want %v %q", tt.in, ok, got, tt.ok, tt.want)
		}
	}
}

func TestParseUintAndAppendUint(t *testing.T) {
	for _, s := range []string{"0", "1", "42", "18446744073709551615"} {
		n, ok := ParseUint([]byte(s))
		if !ok || string(AppendUint(nil, n)) != s {
			t.Errorf("ParseUint(%q) = %d %v", s, n, ok)
		}
	}
	for _, s := range []string{"", "-1", "01", "1.0", "1e3", "18446744073709551616", `"1"`} {
		if n, ok := ParseUint([]byte(s)); ok {
			t.Errorf("ParseUint(%q) = %d, want refusal", s, n)
		}
	}
}

func TestAppendRequest(t *testing.T) {
	got := AppendRequest(nil, 7, "a\"b", []byte(`[1,2]`))
	want := `{"jsonrpc":"2.0","id":7,"method":"a\"b","params":[1,2]}`
	if string(got) != want || !json.Valid(got) {
		t.Fatalf("got %s, want %s", got, want)
	}
	if got := AppendRequest(nil, 1, "m", nil); string(got) != `{"jsonrpc":"2.0","id":1,"method":"m"}` {
		t.Fatalf("without params: %s", got)
	}
}

// TestAppendUintMatchesStrconv: AppendUint writes its digits in place,
// after what dst holds, with or without room for them.
func TestAppendUintMatchesStrconv(t *testing.T) {
	var ns []uint64
	for p := uint64(1); p != 0 && p <= 1e19; p *= 10 {
		ns = append(ns, p-1, p, p+1)
		if p == 1e19 {
			break
		}
	}
	ns = append(ns, 0, 18446744073709551615, 123456789)
	for _, n := range ns {
		want := strconv.AppendUint([]byte("id:"), n, 10)
		if got := AppendUint([]byte("id:"), n); string(got) != string(want) {
			t.Errorf("AppendUint(%d) without room = %q, want %q", n, got, want)
		}
		roomy := append(make([]byte, 0, 64), "id:"...)
		if got := AppendUint(roomy, n); string(got) != string(want) {
			t.Errorf("AppendUint(%d) with room = %q, want %q", n, got, want)
		}
	}
}
