package rpc

import (
	"strconv"
	"testing"

	"pgregory.net/rapid"
)

// TestIntTableMatchesMap drives intTable and a map with the same random puts,
// deletes and lookups over a small key space (so probe runs collide, wrap
// around the end of the table and are shifted back by deletes) and checks
// they agree after every step, including the entry count and iteration.
func TestIntTableMatchesMap(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		var m intTable
		want := map[int64]*Task{}
		tasks := make([]*Task, 8)
		for i := range tasks {
			tasks[i] = &Task{}
		}
		// Keys from a narrow range plus a few extremes.
		key := rapid.OneOf(rapid.Int64Range(-40, 40), rapid.SampledFrom([]int64{-1 << 63, 1<<63 - 1, 1 << 32, 3 << 40}))
		steps := rapid.IntRange(1, 400).Draw(rt, "steps")
		for range steps {
			k := key.Draw(rt, "key")
			switch rapid.IntRange(0, 2).Draw(rt, "op") {
			case 0:
				v := rapid.SampledFrom(tasks).Draw(rt, "task")
				m.put(k, v)
				want[k] = v
			case 1:
				m.del(k)
				delete(want, k)
			}
			if got := m.get(k); got != want[k] {
				rt.Fatalf("get(%d) = %p, want %p", k, got, want[k])
			}
			if m.n != len(want) {
				rt.Fatalf("n = %d, want %d", m.n, len(want))
			}
			seen := 0
			for i, e := range m.slots {
				if e.t == nil {
					continue
				}
				seen++
				if want[e.k] != e.t {
					rt.Fatalf("slot %d holds %d -> %p, want %p", i, e.k, e.t, want[e.k])
				}
			}
			if seen != len(want) {
				rt.Fatalf("%d occupied slots, want %d", seen, len(want))
			}
			if len(m.slots) != 0 && 2*m.n > len(m.slots) {
				rt.Fatalf("%d entries in %d slots: over half full", m.n, len(m.slots))
			}
		}
		for k, v := range want {
			if got := m.get(k); got != v {
				rt.Fatalf("final get(%d) = %p, want %p", k, got, v)
			}
		}
	})
}

// TestIntTableKeepsSlotsUntilTrimmed checks that a table that grew for a
// burst keeps its slots while it empties and refills (no reallocation per
// burst) and gives them back on trim once empty, so an idle connection holds
// no table.
func TestIntTableKeepsSlotsUntilTrimmed(t *testing.T) {
	var m intTable
	task := &Task{}
	for k := range int64(200) {
		m.put(k, task)
	}
	slots := len(m.slots)
	if slots < 400 {
		t.Fatalf("%d slots for 200 entries, want at least 400", slots)
	}
	m.put(7, task)
	m.trim() // not empty: kept
	if len(m.slots) != slots || m.get(7) != task {
		t.Fatalf("trim of a non-empty table: %d slots, get(7) = %p", len(m.slots), m.get(7))
	}
	for k := range int64(200) {
		m.del(k)
	}
	if len(m.slots) != slots || m.n != 0 {
		t.Fatalf("emptied table: %d slots (want %d kept), n=%d", len(m.slots), slots, m.n)
	}
	m.trim()
	if m.slots != nil || m.n != 0 {
		t.Fatalf("trimmed empty table still holds %d slots (n=%d)", len(m.slots), m.n)
	}
	if m.get(5) != nil {
		t.Fatal("get on a trimmed table found an entry")
	}
	m.put(5, task)
	if m.get(5) != task {
		t.Fatal("a trimmed table does not take entries again")
	}
}

// BenchmarkIntTable measures the id table's round trip of one request:
// duplicate check, insert, release.
func BenchmarkIntTable(b *testing.B) {
	var m intTable
	task := &Task{}
	for k := range int64(64) {
		m.put(k, task)
	}
	b.ReportAllocs()
	k := int64(64)
	for b.Loop() {
		if m.get(k) != nil {
			b.Fatal("duplicate")
		}
		m.put(k, task)
		m.del(k - 64)
		k++
	}
}

// TestParseIntID compares parseIntID with strconv over every length up to
// the int64 limits, both signs, and -0.
func TestParseIntID(t *testing.T) {
	check := func(tok string) {
		t.Helper()
		want, err := strconv.ParseInt(tok, 10, 64)
		if err != nil {
			t.Fatalf("bad test token %q: %v", tok, err)
		}
		if got := parseIntID([]byte(tok)); got != want {
			t.Fatalf("parseIntID(%q) = %d, want %d", tok, got, want)
		}
	}
	for _, tok := range []string{"0", "-0", "7", "-7", "10", "99999999", "100000000", "12345678", "-12345678",
		"1234567890123", "9223372036854775807", "-9223372036854775808", "-9223372036854775807",
		"1000000000000000000", "999999999999999999", "90000000000000009"} {
		check(tok)
	}
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.Int64().Draw(t, "n")
		tok := strconv.FormatInt(n, 10)
		if got := parseIntID([]byte(tok)); got != n {
			t.Fatalf("parseIntID(%q) = %d", tok, got)
		}
	})
}

func BenchmarkParseIntID(b *testing.B) {
	toks := [][]byte{[]byte("7"), []byte("1234"), []byte("1764547200123"), []byte("9223372036854775807")}
	for _, tok := range toks {
		b.Run(strconv.Itoa(len(tok)), func(b *testing.B) {
			b.ReportAllocs()
			var sum int64
			for b.Loop() {
				sum += parseIntID(tok)
			}
			if sum == 0 {
				b.Fatal("sum 0")
			}
		})
	}
}
