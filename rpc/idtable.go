package rpc

import "github.com/openengine/edge/codec"

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
// loop-owned. The maps are made lazily.
type idTable struct {
	ints map[int64]*Task
	strs map[string]*Task
}

// lookup finds the task holding the id whose canonical key bytes (from
// codec.IDKey: a type tag, then the canonical digits or unescaped string) are
// key. It does not allocate.
func (tb *idTable) lookup(kind codec.IDKind, key []byte) (*Task, bool) {
	if kind == codec.IDInt {
		t, ok := tb.ints[parseCanonicalInt(key[1:])]
		return t, ok
	}
	t, ok := tb.strs[string(key[1:])]
	return t, ok
}

// makeKey returns the idKey of canonical key bytes; for string ids it
// allocates the string that the table keeps.
func makeKey(kind codec.IDKind, key []byte) idKey {
	if kind == codec.IDInt {
		return idKey{kind: kind, n: parseCanonicalInt(key[1:])}
	}
	return idKey{kind: kind, s: string(key[1:])}
}

// get returns the task holding k.
func (tb *idTable) get(k idKey) (*Task, bool) {
	if k.kind == codec.IDInt {
		t, ok := tb.ints[k.n]
		return t, ok
	}
	t, ok := tb.strs[k.s]
	return t, ok
}

func (tb *idTable) put(k idKey, t *Task) {
	if k.kind == codec.IDInt {
		if tb.ints == nil {
			tb.ints = make(map[int64]*Task)
		}
		tb.ints[k.n] = t
		return
	}
	if tb.strs == nil {
		tb.strs = make(map[string]*Task)
	}
	tb.strs[k.s] = t
}

func (tb *idTable) del(k idKey) {
	if k.kind == codec.IDInt {
		delete(tb.ints, k.n)
	} else {
		delete(tb.strs, k.s)
	}
}

func (tb *idTable) len() int { return len(tb.ints) + len(tb.strs) }

// each calls f for every entry.
func (tb *idTable) each(f func(idKey, *Task)) {
	for n, t := range tb.ints {
		f(idKey{kind: codec.IDInt, n: n}, t)
	}
	for s, t := range tb.strs {
		f(idKey{kind: codec.IDString, s: s}, t)
	}
}

// parseCanonicalInt parses the canonical digits of an int64 id as produced by
// codec.IDKey (the classifier has already checked that it fits an int64).
func parseCanonicalInt(b []byte) int64 {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	var n uint64
	for _, c := range b {
		n = n*10 + uint64(c-'0')
	}
	if neg {
		return -int64(n) // wraps correctly for math.MinInt64
	}
	return int64(n)
}
