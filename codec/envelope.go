package codec

import (
	"bytes"
	"encoding/binary"
	"math/bits"
)

// Kind is the class of an inbound message, decided in the order of CONTRACT.md
// section 2.
type Kind uint8

const (
	// KindParseError: the message is not valid JSON (including empty input,
	// trailing non-whitespace, invalid UTF-8 in a string, nesting deeper than
	// 10,000). Answered with -32700 Parse error, id null.
	KindParseError Kind = iota
	// KindInvalid: valid JSON that fails section 2.4 (not an object, a batch,
	// a notification, wrong jsonrpc, bad id or method). Answered with -32600
	// Invalid Request, id null.
	KindInvalid
	// KindCancel: a well-formed $/cancelRequest (section 2.1, WebSocket only).
	// CancelID and IDKind name the request to cancel; nothing is sent.
	KindCancel
	// KindTracked: jsonrpc (string), id (string or int64), method (string) and
	// params (any) each present exactly once (section 2.2). The jsonrpc value is
	// not checked here: see JSONRPCIs20.
	KindTracked
	// KindSubCancel: a well-formed, id-less subscription/cancel (section 2.3).
	// SubscriptionID names the subscription; nothing is sent.
	KindSubCancel
	// KindUntracked: a valid request after last-wins decoding (section 2.4)
	// that is not tracked, for example because a member appears twice or
	// params is missing (Params is then nil and means null).
	KindUntracked
)

// String returns the name of k, for tests and logs. Safe for concurrent use.
func (k Kind) String() string {
	switch k {
	case KindParseError:
		return "ParseError"
	case KindInvalid:
		return "Invalid"
	case KindCancel:
		return "Cancel"
	case KindTracked:
		return "Tracked"
	case KindSubCancel:
		return "SubCancel"
	case KindUntracked:
		return "Untracked"
	}
	return "Kind(?)"
}

// IDKind is the JSON type of a request id. IDs keep their type: 1 and "1" are
// different requests (CONTRACT.md section 2).
type IDKind uint8

const (
	// IDNone: no usable id.
	IDNone IDKind = iota
	// IDString: a JSON string token.
	IDString
	// IDInt: a JSON integer token (no fraction, no exponent) within int64.
	IDInt
)

// String returns the name of k, for tests and logs. Safe for concurrent use.
func (k IDKind) String() string {
	switch k {
	case IDNone:
		return "None"
	case IDString:
		return "String"
	case IDInt:
		return "Int"
	}
	return "IDKind(?)"
}

// Envelope is the result of Classify. Every slice aliases the classified
// message and is valid only as long as it is; copy what must outlive it.
type Envelope struct {
	Kind Kind
	// ID is the raw id token exactly as in the input (for example `"a\u0062"`
	// or `-17`), for a byte-exact echo; set for KindTracked and KindUntracked,
	// nil otherwise. An id of -0 is an IDInt with identity 0 (see IDKey) that
	// is still echoed as -0.
	ID []byte
	// IDKind is the type of ID, or for KindCancel the type of CancelID.
	IDKind IDKind
	// JSONRPC is the raw jsonrpc value token (the last one for KindUntracked);
	// set for every kind except KindParseError and KindInvalid.
	JSONRPC []byte
	// Method is the raw method string token, with quotes; set like JSONRPC.
	// MethodName decodes it.
	Method []byte
	// Params is the raw params value; nil when absent (only possible for
	// KindUntracked, where it means null).
	Params []byte
	// CancelID is, for KindCancel, the raw id token inside params.
	CancelID []byte
	// SubscriptionID is, for KindSubCancel, the raw subscriptionId string token.
	SubscriptionID []byte
}

// JSONRPCIs20 reports whether the jsonrpc value is a string that decodes to
// exactly "2.0" (escapes honoured). A tracked request needs only a string there
// (CONTRACT.md section 2.2); the session answers one that fails this check
// after admission. It does not allocate. Safe for concurrent use if e is not
// being modified.
func (e *Envelope) JSONRPCIs20() bool {
	t := e.JSONRPC
	return len(t) > 0 && t[0] == '"' && unquotedEquals(t, "2.0")
}

// MethodName returns the method name with its JSON escapes decoded, or nil
// when there is no method. Without escapes (the usual case) the result is a
// sub-slice of the message and scratch is unused; otherwise the name is
// decoded into scratch[:0], which grows only if too small. Safe for concurrent
// use if e is not being modified.
func (e *Envelope) MethodName(scratch []byte) []byte {
	t := e.Method
	if len(t) < 2 || t[0] != '"' {
		return nil
	}
	if in := t[1 : len(t)-1]; bytes.IndexByte(in, '\\') < 0 {
		return in
	}
	name, ok := AppendUnquote(scratch[:0], t)
	if !ok {
		return nil
	}
	return name
}

// IDKey appends to dst the canonical identity key of an id token as reported
// by Classify: a type tag byte ('s' or 'i') followed by the decoded string, or
// by the integer in canonical decimal. So 1 and "1" differ, "a" and "\u0061"
// are the same id, and -0 is the same id as 0. The key is injective over JSON
// string values: a lone surrogate escape is kept as its WTF-8 bytes, not
// decoded to U+FFFD, so "\ud800", "\udfff" and "\ufffd" are three ids
// (CONTRACT.md section 2). A string without escapes is its own key. For
// IDNone it returns dst unchanged. tok must be a token Classify reported with
// that kind; anything else is appended raw after the tag. It does not
// allocate when dst has room. Safe for concurrent use.
func IDKey(dst []byte, kind IDKind, tok []byte) []byte {
	switch kind {
	case IDString:
		dst = append(dst, 's')
		if out, ok := appendUnquote(dst, tok, true); ok {
			return out
		}
		return append(dst, tok...)
	case IDInt:
		dst = append(dst, 'i')
		// JSON integers have no leading zeros and no '+', so the token is
		// already canonical except for negative zero.
		if len(tok) == 2 && tok[0] == '-' && tok[1] == '0' {
			tok = tok[1:]
		}
		return append(dst, tok...)
	}
	return dst
}

// Indexes of the top-level members Classify counts.
const (
	memberJSONRPC = iota
	memberID
	memberMethod
	memberParams
	memberCount
)

// member records the occurrences of one top-level member: how many (capped at
// 2, which is all the rules need) and the last value's bounds.
type member struct {
	n          uint8
	isInt      bool // the last value is an integer number token
	start, end int
}

// Names of the only member of a params object that steps 2.1 and 2.3 look for.
const (
	soleOther = iota
	soleID
	soleSubscriptionID
)

// sole describes the only member of the last params value, when that value
// is an object with exactly one member.
type sole struct {
	ok         bool
	key        uint8 // soleOther, soleID, soleSubscriptionID
	isInt      bool
	start, end int
}

// envelopeScan is what one pass over a top-level object records.
type envelopeScan struct {
	m      [memberCount]member
	params sole
}

// Classify scans msg once, validating it as JSON, and classifies it in the
// order of CONTRACT.md section 2. ws selects the WebSocket binding: step 2.1
// ($/cancelRequest) applies only there; on NDJSON a $/cancelRequest is an
// ordinary envelope. Member names are compared after unescaping ("\u0069d" is
// id) and "present exactly once" counts such spellings together. All slices in
// the result alias msg (with capacity clipped to their length). It does not
// allocate. The shape that clients send takes a fast path with the same
// results (see scanCanonical). Safe for concurrent use.
func Classify(msg []byte, ws bool) (e Envelope) {
	if ie, me, pe := scanCanonical(msg); pe >= 0 {
		e.Kind, e.IDKind = KindTracked, IDInt
		if msg[canonIDStart] == '"' {
			e.IDKind = IDString
		}
		ms, ps := ie+len(canonMethod)-1, me+len(canonParams)
		e.ID = msg[canonIDStart:ie:ie]
		e.JSONRPC = msg[canonJSONRPCStart:canonJSONRPCEnd:canonJSONRPCEnd]
		e.Method, e.Params = msg[ms:me:me], msg[ps:pe:pe]
		return e
	}
	var sc envelopeScan
	if k, ok := sc.scan(msg); !ok {
		e.Kind = k
		return e
	}
	return sc.classify(msg, ws)
}

// classifyGeneral is Classify without the fast path: the one pass that
// handles every input. The fast path's tests compare the two.
func classifyGeneral(msg []byte, ws bool) Envelope {
	var sc envelopeScan
	if k, ok := sc.scan(msg); !ok {
		return Envelope{Kind: k}
	}
	return sc.classify(msg, ws)
}

// scan validates msg as JSON. For an object it records the members classify
// needs and reports ok; otherwise k is msg's kind: KindParseError, or
// KindInvalid for valid JSON that is not an object (a batch or a scalar).
func (sc *envelopeScan) scan(b []byte) (k Kind, ok bool) {
	i := skipJSONSpace(b, 0)
	if i >= len(b) {
		return KindParseError, false
	}
	if b[i] != '{' {
		// Arrays (batches) and scalars: valid JSON but never a request.
		if i = skipJSONValue(b, i, 0); i < 0 || skipJSONSpace(b, i) != len(b) {
			return KindParseError, false
		}
		return KindInvalid, false
	}
	if i = sc.scanObject(b, i); i < 0 || skipJSONSpace(b, i) != len(b) {
		return KindParseError, false
	}
	return 0, true
}

// Literal pieces of the canonical request shape and the fixed positions in
// it, see scanCanonical. Each piece is compared as one constant of at most 16
// bytes, which the compiler turns into word loads (a longer one would cost a
// call to memequal).
const (
	canonJSONRPC      = `{"jsonrpc":"2.0"`
	canonID           = `,"id":`
	canonMethod       = `,"method":"`
	canonParams       = `,"params":`
	canonJSONRPCStart = len(`{"jsonrpc":`) // the "2.0" token
	canonJSONRPCEnd   = len(canonJSONRPC)
	canonIDStart      = len(canonJSONRPC) + len(canonID)
)

// scanCanonical is Classify's fast path. It recognises the shape that clients
// send (our client package, the load generator, go-ethereum-style clients):
//
//	{"jsonrpc":"2.0","id":<id>,"method":"<name>","params":<value>}
//
// with no whitespace outside params, members in that order, an int64 id or a
// string id of printable ASCII without escapes, a method name of the same
// kind, and nothing but whitespace after the closing brace. Such a message is
// a tracked request (CONTRACT.md section 2.2) unless step 2.1 claims it, so
// the method names that steps 2.1 and 2.3 treat specially are left to the
// general path. For a match it returns the ends of the id, method and params
// tokens (their starts follow from the fixed pieces); otherwise pe is -1 and
// the caller runs classifyGeneral, which returns the same Envelope for every
// message this accepts.
func scanCanonical(b []byte) (ie, me, pe int) {
	if len(b) <= canonIDStart || string(b[:canonJSONRPCEnd]) != canonJSONRPC ||
		string(b[canonJSONRPCEnd:canonIDStart]) != canonID {
		return 0, 0, -1
	}
	if b[canonIDStart] == '"' {
		ie = scanPlainString(b, canonIDStart)
	} else {
		ie = scanPlainInt(b, canonIDStart)
	}
	// The comma after the id also rules out fractions and exponents.
	if ie < 0 || len(b)-ie < len(canonMethod) || string(b[ie:ie+len(canonMethod)]) != canonMethod {
		return 0, 0, -1
	}
	ms := ie + len(canonMethod) - 1 // the method's opening quote
	me = scanPlainString(b, ms)
	if me < 0 || len(b)-me <= len(canonParams) || string(b[me:me+len(canonParams)]) != canonParams {
		return 0, 0, -1
	}
	// Without escapes the token's content is the name itself.
	if n := me - ms - 2; n == len("$/cancelRequest") && string(b[ms+1:me-1]) == "$/cancelRequest" ||
		n == len("subscription/cancel") && string(b[ms+1:me-1]) == "subscription/cancel" {
		return 0, 0, -1
	}
	if ps := me + len(canonParams); b[ps] == '{' {
		pe = skipParamsObject(b, ps)
	} else {
		pe = skipJSONValue(b, ps, 1)
	}
	if pe < 0 || pe >= len(b) || b[pe] != '}' || skipJSONSpace(b, pe+1) != len(b) {
		return 0, 0, -1
	}
	return ie, me, pe
}

// skipParamsObject validates the params object at b[i] == '{' (depth 1) and
// returns the index past its closing brace, or -1. It does what
// skipJSONValue(b, i, 1) does at a fraction of the cost for the usual flat
// params object: one level, no bit stack; nested values go to skipJSONValue.
func skipParamsObject(b []byte, i int) int {
	if i = skipJSONSpace(b, i+1); i < len(b) && b[i] == '}' {
		return i + 1
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return -1
		}
		if i, _ = scanJSONString(b, i); i < 0 {
			return -1
		}
		if i = skipJSONSpace(b, i); i >= len(b) || b[i] != ':' {
			return -1
		}
		if i = skipJSONSpace(b, i+1); i >= len(b) {
			return -1
		}
		switch b[i] { // scanMemberValue, inlined
		case '"':
			i, _ = scanJSONString(b, i)
		case '{', '[':
			i = skipJSONValue(b, i, 2)
		case 't', 'f', 'n':
			i = scanJSONLiteral(b, i)
		default:
			i, _ = scanJSONNumber(b, i)
		}
		if i < 0 {
			return -1
		}
		if i = skipJSONSpace(b, i); i >= len(b) {
			return -1
		}
		switch b[i] {
		case ',':
			i = skipJSONSpace(b, i+1)
		case '}':
			return i + 1
		default:
			return -1
		}
	}
}

// scanPlainString scans the string token whose opening quote is b[i] when it
// holds only printable ASCII and no escapes. It returns the index past the
// closing quote, or -1 for any other string and at the end of the input.
func scanPlainString(b []byte, i int) int {
	i = strStop(b, i+1)
	if i >= len(b) || b[i] != '"' {
		return -1
	}
	return i + 1
}

// scanPlainInt scans the integer part of a number token at b[i] (a '-' and
// digits without leading zeros) when it lies within int64 and the input holds
// at least eight bytes from its first digit on. It returns the index past it,
// or -1. Whether a fraction or an exponent follows is the caller's to check.
func scanPlainInt(b []byte, i int) int {
	j := i
	if b[j] == '-' {
		j++
	}
	if j+8 > len(b) {
		return -1
	}
	n := bits.TrailingZeros64(jsonNonDigits(binary.LittleEndian.Uint64(b[j:]))) >> 3
	switch {
	case n == 0:
		return -1
	case n == 8: // more than eight digits: rare, byte by byte
		for j+n < len(b) && '0' <= b[j+n] && b[j+n] <= '9' {
			n++
		}
	}
	if b[j] == '0' && n > 1 {
		return -1 // a leading zero: not JSON, the general path says so
	}
	j += n
	// 18 characters hold at most 18 digits, always within int64.
	if j-i > 18 && !fitsInt64(b[i:j]) {
		return -1
	}
	return j
}

// scanObject validates the object at b[i] == '{' and records the members
// Classify needs. It returns the index past the closing brace, or -1.
func (sc *envelopeScan) scanObject(b []byte, i int) int {
	i = skipJSONSpace(b, i+1)
	if i >= len(b) {
		return -1
	}
	if b[i] == '}' {
		return i + 1
	}
	for {
		if b[i] != '"' {
			return -1
		}
		slot, ke := plainMemberKey(b, i)
		if ke < 0 {
			var esc bool
			if ke, esc = scanJSONString(b, i); ke < 0 {
				return -1
			}
			slot = memberSlot(b[i:ke], esc)
		}
		i = skipJSONSpace(b, ke)
		if i >= len(b) || b[i] != ':' {
			return -1
		}
		i = skipJSONSpace(b, i+1)
		if i >= len(b) {
			return -1
		}
		vs, isInt := i, false
		if slot == memberParams && b[i] == '{' {
			i, sc.params = scanParamsObject(b, i)
		} else {
			if slot == memberParams {
				sc.params = sole{}
			}
			i, isInt = scanMemberValue(b, i, 1)
		}
		if i < 0 {
			return -1
		}
		if slot >= 0 {
			p := &sc.m[slot]
			if p.n < 2 {
				p.n++
			}
			p.isInt, p.start, p.end = isInt, vs, i
		}
		i = skipJSONSpace(b, i)
		if i >= len(b) {
			return -1
		}
		switch b[i] {
		case ',':
			i = skipJSONSpace(b, i+1)
			if i >= len(b) {
				return -1
			}
		case '}':
			return i + 1
		default:
			return -1
		}
	}
}

// scanMemberValue scans the value at b[i] (i < len(b)) of a member of an
// object nested at depth, returning the index past it, or -1, and whether it
// is an integer token.
func scanMemberValue(b []byte, i, depth int) (int, bool) {
	switch b[i] {
	case '"':
		i, _ = scanJSONString(b, i)
		return i, false
	case '{', '[':
		return skipJSONValue(b, i, depth), false
	case 't', 'f', 'n':
		return scanJSONLiteral(b, i), false
	}
	return scanJSONNumber(b, i)
}

// scanParamsObject validates the params object at b[i] == '{' (depth 2) and
// describes its member when it has exactly one, so steps 2.1 and 2.3 need no
// second pass. It returns the index past the closing brace, or -1.
func scanParamsObject(b []byte, i int) (int, sole) {
	i = skipJSONSpace(b, i+1)
	if i >= len(b) {
		return -1, sole{}
	}
	if b[i] == '}' {
		return i + 1, sole{}
	}
	if b[i] != '"' {
		return -1, sole{}
	}
	ks := i
	ke, _ := scanJSONString(b, i)
	if ke < 0 {
		return -1, sole{}
	}
	i = skipJSONSpace(b, ke)
	if i >= len(b) || b[i] != ':' {
		return -1, sole{}
	}
	i = skipJSONSpace(b, i+1)
	if i >= len(b) {
		return -1, sole{}
	}
	vs := i
	i, isInt := scanMemberValue(b, i, 2)
	if i < 0 {
		return -1, sole{}
	}
	ve := i
	i = skipJSONSpace(b, i)
	if i >= len(b) {
		return -1, sole{}
	}
	if b[i] == '}' {
		s := sole{ok: true, isInt: isInt, start: vs, end: ve}
		switch key := b[ks:ke]; {
		case unquotedEquals(key, "id"):
			s.key = soleID
		case unquotedEquals(key, "subscriptionId"):
			s.key = soleSubscriptionID
		}
		return i + 1, s
	}
	// More than one member: validate the rest.
	for {
		if b[i] != ',' {
			return -1, sole{}
		}
		i = skipJSONSpace(b, i+1)
		if i >= len(b) {
			return -1, sole{}
		}
		if i = skipJSONMemberKey(b, i); i < 0 {
			return -1, sole{}
		}
		if i = skipJSONValue(b, i, 2); i < 0 {
			return -1, sole{}
		}
		i = skipJSONSpace(b, i)
		if i >= len(b) {
			return -1, sole{}
		}
		if b[i] == '}' {
			return i + 1, sole{}
		}
	}
}

// plainMemberKey recognises the plain spellings of the four members at b[i]
// without a full string scan, returning the member index and the index past
// the key token, or -1, -1 when the key is anything else.
func plainMemberKey(b []byte, i int) (int, int) {
	if len(b)-i < 9 {
		return -1, -1
	}
	switch b[i+1] {
	case 'j':
		if string(b[i:i+9]) == `"jsonrpc"` {
			return memberJSONRPC, i + 9
		}
	case 'i':
		if string(b[i:i+4]) == `"id"` {
			return memberID, i + 4
		}
	case 'm':
		if string(b[i:i+8]) == `"method"` {
			return memberMethod, i + 8
		}
	case 'p':
		if string(b[i:i+8]) == `"params"` {
			return memberParams, i + 8
		}
	}
	return -1, -1
}

// memberSlot maps a key token (with quotes) to its member index, or -1.
// esc reports whether the token holds escapes.
func memberSlot(key []byte, esc bool) int {
	if !esc {
		switch string(key[1 : len(key)-1]) {
		case "jsonrpc":
			return memberJSONRPC
		case "id":
			return memberID
		case "method":
			return memberMethod
		case "params":
			return memberParams
		}
		return -1
	}
	switch {
	case unquotedEquals(key, "jsonrpc"):
		return memberJSONRPC
	case unquotedEquals(key, "id"):
		return memberID
	case unquotedEquals(key, "method"):
		return memberMethod
	case unquotedEquals(key, "params"):
		return memberParams
	}
	return -1
}

// classify applies CONTRACT.md section 2 steps 1-4 to the members recorded
// from a valid top-level object.
func (sc *envelopeScan) classify(b []byte, ws bool) Envelope {
	jr, id, me, pa := &sc.m[memberJSONRPC], &sc.m[memberID], &sc.m[memberMethod], &sc.m[memberParams]
	tok := func(p *member) []byte { return b[p.start:p.end:p.end] }
	isString := func(p *member) bool { return p.n > 0 && b[p.start] == '"' }
	once := jr.n == 1 && isString(jr) && me.n == 1 && isString(me) && pa.n == 1
	ps := &sc.params

	// Step 1: $/cancelRequest, WebSocket only; other top-level members ignored.
	if ws && once && ps.ok && ps.key == soleID && unquotedEquals(tok(me), "$/cancelRequest") {
		if k := idKind(b[ps.start:ps.end], ps.isInt); k != IDNone {
			return Envelope{Kind: KindCancel, IDKind: k, CancelID: b[ps.start:ps.end:ps.end],
				JSONRPC: tok(jr), Method: tok(me), Params: tok(pa)}
		}
	}
	// Step 2: tracked request.
	idk := IDNone
	if id.n > 0 {
		idk = idKind(tok(id), id.isInt)
	}
	if once && id.n == 1 && idk != IDNone {
		return Envelope{Kind: KindTracked, ID: tok(id), IDKind: idk,
			JSONRPC: tok(jr), Method: tok(me), Params: tok(pa)}
	}
	// Step 3: id-less subscription/cancel with params exactly {"subscriptionId":<string>}.
	if once && id.n == 0 && ps.ok && ps.key == soleSubscriptionID && b[ps.start] == '"' &&
		unquotedEquals(tok(me), "subscription/cancel") {
		return Envelope{Kind: KindSubCancel, SubscriptionID: b[ps.start:ps.end:ps.end],
			JSONRPC: tok(jr), Method: tok(me), Params: tok(pa)}
	}
	// Step 4: last-wins decode.
	if isString(jr) && unquotedEquals(tok(jr), "2.0") && isString(me) && idk != IDNone {
		env := Envelope{Kind: KindUntracked, ID: tok(id), IDKind: idk,
			JSONRPC: tok(jr), Method: tok(me)}
		if pa.n > 0 {
			env.Params = tok(pa)
		}
		return env
	}
	return Envelope{Kind: KindInvalid}
}

// idKind returns the id type of a value token: a string, an integer within
// int64, or IDNone (null, bool, object, array, fraction, exponent, out of range).
func idKind(tok []byte, isInt bool) IDKind {
	if tok[0] == '"' {
		return IDString
	}
	if isInt && fitsInt64(tok) {
		return IDInt
	}
	return IDNone
}

// fitsInt64 reports whether the integer token tok is within int64.
func fitsInt64(tok []byte) bool {
	digits, limit := tok, "9223372036854775807"
	if tok[0] == '-' {
		digits, limit = tok[1:], "9223372036854775808"
	}
	switch {
	case len(digits) < len(limit):
		return true
	case len(digits) > len(limit):
		return false
	}
	// Same length, no leading zeros: byte order is numeric order.
	return string(digits) <= limit
}
