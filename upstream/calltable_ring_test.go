package upstream

import (
	"testing"

	"pgregory.net/rapid"
)

// TestCallTableRingModel checks the table's id index (ring and overflow
// map) against a map under random interleavings of what a link does:
// sequential new ids (forward, and the NS_unsubscribe of subCancelLocked),
// answers to recent or old ids, entries that live on (subscriptions,
// lingering calls) while thousands of newer ids pass, rekeys, lookups of
// ids never used or already gone, and the sweep's shrink.
func TestCallTableRingModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		tab := newCallTable()
		model := map[uint64]*entry{}
		next := uint64(0)
		check := func(id uint64) {
			if got, want := tab.get(id), model[id]; got != want {
				rt.Fatalf("get(%d) = %p, want %p", id, got, want)
			}
		}
		// any returns an id in the model, biased to the oldest or the
		// newest, or 0 when it is empty.
		anyID := func(label string) uint64 {
			if len(model) == 0 {
				return 0
			}
			ids := make([]uint64, 0, len(model))
			for id := range model {
				ids = append(ids, id)
			}
			return rapid.SampledFrom(ids).Draw(rt, label)
		}
		for range rapid.IntRange(1, 400).Draw(rt, "steps") {
			switch rapid.IntRange(0, 6).Draw(rt, "op") {
			case 0, 1: // a burst of new calls
				for range rapid.IntRange(1, 300).Draw(rt, "burst") {
					next++
					model[next] = tab.add(next, nil, nil, 1, int64(next))
				}
			case 2: // ids pass without entries of this table (another link's, or refused)
				next += uint64(rapid.IntRange(1, 5000).Draw(rt, "skip"))
			case 3: // an answer ends one
				if id := anyID("end"); id != 0 {
					tab.remove(model[id])
					delete(model, id)
				}
			case 4: // some end, as a window of answers would
				n := rapid.IntRange(0, len(model)).Draw(rt, "ends")
				for id := range model {
					if n == 0 {
						break
					}
					tab.remove(model[id])
					delete(model, id)
					n--
				}
			case 5: // rekeyed under a new id (NS_unsubscribe)
				if id := anyID("rekey"); id != 0 {
					e := model[id]
					delete(model, id)
					next++
					tab.rekey(e, next)
					model[next] = e
				}
			case 6:
				tab.shrink()
			}
			if tab.len() != len(model) {
				rt.Fatalf("len %d, want %d", tab.len(), len(model))
			}
			for id, e := range model {
				if e.id != id {
					rt.Fatalf("entry filed under %d has id %d", id, e.id)
				}
				check(id)
			}
			check(next + 1)
			check(0)
			if next > 0 {
				check(rapid.Uint64Range(1, next).Draw(rt, "probe"))
			}
			seen := 0
			tab.each(func(e *entry) {
				if model[e.id] != e {
					rt.Fatalf("each gave entry %d, not in the model", e.id)
				}
				seen++
			})
			if seen != len(model) {
				rt.Fatalf("each gave %d entries, want %d", seen, len(model))
			}
			if len(tab.ring)&(len(tab.ring)-1) != 0 || len(tab.ring) > maxRing {
				rt.Fatalf("ring of %d slots", len(tab.ring))
			}
		}
	})
}

// TestCallTableRingBounded checks that a link with a few long-lived
// entries and steady traffic keeps its ring small (the old entries go to
// the overflow map instead of growing it), and that a burst's ring is
// shrunk by the sweep once the burst is answered.
func TestCallTableRingBounded(t *testing.T) {
	tab := newCallTable()
	var live []*entry
	for id := uint64(1); id <= 4; id++ {
		live = append(live, tab.add(id, nil, nil, 1, int64(id)))
	}
	for id := uint64(5); id < 100_000; id++ { // one call at a time
		tab.remove(tab.add(id, nil, nil, 1, int64(id)))
	}
	if len(tab.ring) != minRing {
		t.Fatalf("ring of %d slots for 4 live entries and one call at a time, want %d", len(tab.ring), minRing)
	}
	for _, e := range live {
		if tab.get(e.id) != e {
			t.Fatalf("entry %d lost", e.id)
		}
	}
	var burst []*entry
	for id := uint64(100_000); id < 110_000; id++ {
		burst = append(burst, tab.add(id, nil, nil, 1, int64(id)))
	}
	if len(tab.ring) < 10_000 || len(tab.over) > len(live) {
		t.Fatalf("a burst of 10,000: ring %d, overflow %d", len(tab.ring), len(tab.over))
	}
	for _, e := range burst {
		tab.remove(e)
	}
	tab.shrink()
	if len(tab.ring) != minRing {
		t.Fatalf("ring of %d slots after the burst and a sweep, want %d", len(tab.ring), minRing)
	}
	for _, e := range live {
		if tab.get(e.id) != e {
			t.Fatalf("entry %d lost", e.id)
		}
	}
}

// BenchmarkCallTable is a call's life in a link's id index with 64 calls in
// flight (a pipelining client's window): filed under its id, looked up by
// its answer's id, taken out; "map" is the map the ring replaced.
func BenchmarkCallTable(b *testing.B) {
	const window = 64
	type index struct {
		put func(e *entry)
		get func(id uint64) *entry
		del func(e *entry)
	}
	run := func(b *testing.B, x index) {
		var free []*entry
		for id := uint64(1); id <= window; id++ {
			x.put(&entry{id: id})
		}
		b.ReportAllocs()
		for id := uint64(window + 1); b.Loop(); id++ {
			var e *entry
			if n := len(free); n > 0 {
				e, free = free[n-1], free[:n-1]
			} else {
				e = new(entry)
			}
			*e = entry{id: id, state: callSent}
			x.put(e)
			old := x.get(id - window)
			if old == nil {
				b.Fatal("lost")
			}
			x.del(old)
			*old = entry{state: callEnded}
			free = append(free, old)
		}
	}
	b.Run("ring", func(b *testing.B) {
		tab := newCallTable()
		run(b, index{put: tab.put, get: tab.get, del: tab.del})
	})
	b.Run("map", func(b *testing.B) {
		ids := map[uint64]*entry{}
		run(b, index{put: func(e *entry) { ids[e.id] = e }, get: func(id uint64) *entry { return ids[id] },
			del: func(e *entry) { delete(ids, e.id) }})
	})
}
