package rpc

import (
	"encoding/binary"

	"github.com/openengine/edge/codec"
)

// idKey is the identity of a request id (CONTRACT.md section 2: ids keep
// their JSON type, so 1 and "1" differ; "a" and "\u0061" are the same id).
// Integer ids, the common case, are keyed by value, which costs no string
// allocation and hashes faster.
type idKey struct {
	kind codec.IDKind // codec.IDNone for untracked requests
	n    int64        // integer ids
	s    string       // string ids, unescaped
}

// tracked reports whether k names an id (untracked requests have none).
func (k idKey) tracked() bool { return k.kind != codec.IDNone }

// idTable is a session's in-flight id set: tracked requests holding their id.
// loop-owned. Integer ids live in an open-addressing table (intTable), string
// ids in a map; both are made lazily.
type idTable struct {
	ints intTable
	strs map[string]*Task
}

// find returns the identity of an id token as Classify reported it, and the
// task holding that id, if any. An integer id is parsed once, from its token;
// for a string id the key's string is not made yet (it would allocate, and
// most lookups are for new ids): scratch receives the canonical key bytes
// (codec.IDKey) and key.s stays empty until own fills it.
func (tb *idTable) find(kind codec.IDKind, tok []byte, scratch *[]byte) (key idKey, t *Task) {
	if kind == codec.IDInt {
		key = idKey{kind: kind, n: parseIntID(tok)}
		return key, tb.ints.get(key.n)
	}
	*scratch = codec.IDKey((*scratch)[:0], kind, tok)
	return idKey{kind: kind}, tb.strs[string((*scratch)[1:])]
}

// own completes a key from find for keeping in the table: a string id gets
// its string, made from the canonical bytes find left in scratch.
func own(key idKey, scratch []byte) idKey {
	if key.kind == codec.IDString {
		key.s = string(scratch[1:])
	}
	return key
}

// get returns the task holding k.
func (tb *idTable) get(k idKey) (*Task, bool) {
	if k.kind == codec.IDInt {
		t := tb.ints.get(k.n)
		return t, t != nil
	}
	t, ok := tb.strs[k.s]
	return t, ok
}

// put records that t holds k. t must not be nil.
func (tb *idTable) put(k idKey, t *Task) {
	if k.kind == codec.IDInt {
		tb.ints.put(k.n, t)
		return
	}
	if tb.strs == nil {
		tb.strs = make(map[string]*Task)
	}
	tb.strs[k.s] = t
}

func (tb *idTable) del(k idKey) {
	if k.kind == codec.IDInt {
		tb.ints.del(k.n)
	} else {
		delete(tb.strs, k.s)
	}
}

func (tb *idTable) len() int { return tb.ints.n + len(tb.strs) }

// each calls f for every entry.
func (tb *idTable) each(f func(idKey, *Task)) {
	for _, e := range tb.ints.slots {
		if e.t != nil {
			f(idKey{kind: codec.IDInt, n: e.k}, e.t)
		}
	}
	for s, t := range tb.strs {
		f(idKey{kind: codec.IDString, s: s}, t)
	}
}

// intTable maps int64 ids to tasks with open addressing, linear probing and
// backward-shift deletion (no tombstones). A session holds at most
// MaxConnTasks ids, so the table stays small and is kept at most half full;
// it costs a few dozen instructions per operation where the runtime map,
// built for arbitrary sizes, costs several times that on the request path.
// It keeps its size while requests come and go (a pipelining client empties
// and refills it all the time); trim releases it once the connection is idle.
type intTable struct {
	slots []intSlot
	n     int
}

// intSlot is one slot of an intTable; t is nil when the slot is empty.
type intSlot struct {
	k int64
	t *Task
}

const intTableMin = 16 // slots of a new table; a power of two

// slot returns the home slot of k: Fibonacci hashing of the id, so that
// sequential ids, the common case, spread over the table.
func (m *intTable) slot(k int64) int {
	return int((uint64(k) * 0x9E3779B97F4A7C15) >> 32 & uint64(len(m.slots)-1))
}

func (m *intTable) get(k int64) *Task {
	if m.n == 0 {
		return nil
	}
	mask := len(m.slots) - 1
	for i := m.slot(k); ; i = (i + 1) & mask {
		if e := &m.slots[i]; e.t == nil || e.k == k {
			return e.t
		}
	}
}

func (m *intTable) put(k int64, t *Task) {
	if 2*(m.n+1) > len(m.slots) {
		m.grow()
	}
	mask := len(m.slots) - 1
	for i := m.slot(k); ; i = (i + 1) & mask {
		e := &m.slots[i]
		if e.t == nil {
			e.k, e.t = k, t
			m.n++
			return
		}
		if e.k == k {
			e.t = t
			return
		}
	}
}

func (m *intTable) del(k int64) {
	if m.n == 0 {
		return
	}
	mask := len(m.slots) - 1
	i := m.slot(k)
	for {
		if m.slots[i].t == nil {
			return // absent
		}
		if m.slots[i].k == k {
			break
		}
		i = (i + 1) & mask
	}
	m.n--
	// Backward-shift: move later entries of the probe run into the hole when
	// their home slot does not lie cyclically in (hole, j].
	for j := (i + 1) & mask; m.slots[j].t != nil; j = (j + 1) & mask {
		h := m.slot(m.slots[j].k)
		if (j > i && (h <= i || h > j)) || (j < i && h <= i && h > j) {
			m.slots[i] = m.slots[j]
			i = j
		}
	}
	m.slots[i] = intSlot{}
}

// trim releases the table's memory if it holds no entry.
func (m *intTable) trim() {
	if m.n == 0 {
		*m = intTable{}
	}
}

// grow doubles the table (or makes the first one) and re-inserts every entry.
func (m *intTable) grow() {
	old := m.slots
	m.slots, m.n = make([]intSlot, max(intTableMin, 2*len(old))), 0
	for _, e := range old {
		if e.t != nil {
			m.put(e.k, e.t)
		}
	}
}

// parseIntID parses an integer id token as Classify reported it (IDInt: a
// JSON integer within int64, no fraction or exponent). -0 is 0, the same id.
// Clients often number requests with long ids (a timestamp, a 13-digit
// sequence): eight digits at a time are combined in one word (digits8), the
// rest one by one.
func parseIntID(b []byte) int64 {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	var n uint64
	for ; len(b) >= 8; b = b[8:] {
		n = n*100_000_000 + digits8(binary.LittleEndian.Uint64(b))
	}
	for _, c := range b {
		n = n*10 + uint64(c-'0')
	}
	if neg {
		return -int64(n) // wraps correctly for math.MinInt64
	}
	return int64(n)
}

// digits8 returns the value of eight ASCII digits loaded little-endian (the
// first digit in the lowest byte): pairs, then quads, then the halves are
// combined, each step a multiply, a shift and a mask.
func digits8(v uint64) uint64 {
	v -= 0x3030303030303030
	v = (v*10 + v>>8) & 0x00FF00FF00FF00FF
	v = (v*100 + v>>16) & 0x0000FFFF0000FFFF
	return (v*10000 + v>>32) & 0xFFFFFFFF
}
