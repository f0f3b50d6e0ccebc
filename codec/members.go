package codec

// This file reads JSON objects member by member, for the messages edge
// passes on between a client and an upstream (CONTRACT.md section 10): the
// members it does not rewrite are copied as raw bytes, never decoded.

// EachMember validates obj as one JSON object (surrounding whitespace
// allowed) and calls fn with the raw key token (quotes included) and the raw
// value of each member, in order, until fn returns false. It reports whether
// obj is a valid object; when fn stops early the rest is not validated. It
// does not allocate. Safe for concurrent use.
func EachMember(obj []byte, fn func(key, value []byte) bool) bool {
	i := skipJSONSpace(obj, 0)
	if i >= len(obj) || obj[i] != '{' {
		return false
	}
	i = skipJSONSpace(obj, i+1)
	if i < len(obj) && obj[i] == '}' {
		return skipJSONSpace(obj, i+1) == len(obj)
	}
	for i < len(obj) {
		if obj[i] != '"' {
			return false
		}
		ke, _ := scanJSONString(obj, i)
		if ke < 0 {
			return false
		}
		v := skipJSONSpace(obj, ke)
		if v >= len(obj) || obj[v] != ':' {
			return false
		}
		if v = skipJSONSpace(obj, v+1); v >= len(obj) {
			return false
		}
		k := i
		e := skipJSONValue(obj, v, 1)
		if e < 0 {
			return false
		}
		if !fn(obj[k:ke], obj[v:e]) {
			return true
		}
		var end, ok bool
		if i, end, ok = nextItem(obj, e, '}'); end {
			return ok
		}
	}
	return false
}

// nextItem steps past the separator after a member or element that ends at
// e: to the next item (end false), or past the closing byte to the end of
// the input, reporting whether only whitespace follows (end true, ok).
func nextItem(b []byte, e int, closing byte) (next int, end, ok bool) {
	i := skipJSONSpace(b, e)
	switch {
	case i >= len(b):
		return i, true, false
	case b[i] == ',':
		return skipJSONSpace(b, i+1), false, true
	case b[i] == closing:
		return i, true, skipJSONSpace(b, i+1) == len(b)
	}
	return i, true, false
}

// KeyIs reports whether the key token key (as EachMember hands it, a valid
// JSON string token) spells s, escapes decoded. Safe for concurrent use.
func KeyIs(key []byte, s string) bool { return unquotedEquals(key, s) }

// AppendRequest appends the request
// {"jsonrpc":"2.0","id":<id>,"method":<method>,"params":<params>} with an
// integer id to dst; params is raw JSON, empty omits the member. It does not
// allocate when dst has room. Safe for concurrent use.
func AppendRequest(dst []byte, id uint64, method string, params []byte) []byte {
	dst = append(dst, `{"jsonrpc":"2.0","id":`...)
	dst = AppendUint(dst, id)
	dst = append(dst, `,"method":`...)
	dst = AppendQuote(dst, method)
	return appendParams(dst, params)
}

// AppendRequestQuoted is AppendRequest with the method name quoted already
// (AppendQuote's output), for a caller that sends the same method again
// and again. Safe for concurrent use.
func AppendRequestQuoted(dst []byte, id uint64, quoted, params []byte) []byte {
	dst = append(dst, `{"jsonrpc":"2.0","id":`...)
	dst = AppendUint(dst, id)
	dst = append(dst, `,"method":`...)
	dst = append(dst, quoted...)
	return appendParams(dst, params)
}

// appendParams ends a request: its params member, unless empty, and the
// closing brace.
func appendParams(dst, params []byte) []byte {
	if len(params) > 0 {
		dst = append(dst, `,"params":`...)
		dst = append(dst, params...)
	}
	return append(dst, '}')
}

// AppendRawError appends the error response {"jsonrpc":"2.0","id":<id|null>,"error":<object>}
// with an error object another server sent, byte for byte. Safe for
// concurrent use.
func AppendRawError(dst, id, object []byte) []byte {
	dst = append(dst, `{"jsonrpc":"2.0","id":`...)
	dst = appendRaw(dst, id)
	dst = append(dst, `,"error":`...)
	dst = append(dst, object...)
	return append(dst, '}')
}

// ParseUint parses a JSON number token that is a non-negative integer
// without sign, fraction or exponent and fits in a uint64.
func ParseUint(tok []byte) (uint64, bool) {
	if len(tok) == 0 || len(tok) > 20 || (tok[0] == '0' && len(tok) > 1) {
		return 0, false
	}
	var n uint64
	for _, c := range tok {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if n > (1<<64-1-d)/10 {
			return 0, false
		}
		n = n*10 + d
	}
	return n, true
}

// AppendUint appends n in decimal. The digits are written in place, not
// through a buffer and a copy: it writes every id edge forwards
// (BenchmarkProxyPipelined). Safe for concurrent use.
func AppendUint(dst []byte, n uint64) []byte {
	if n < 10 {
		return append(dst, byte('0'+n))
	}
	k := 2 // digits
	for m := n / 100; m != 0; m /= 10 {
		k++
	}
	l := len(dst)
	if cap(dst)-l < k {
		dst = append(dst, make([]byte, k)...)
	} else {
		dst = dst[:l+k]
	}
	for i := l + k - 1; i >= l; i-- {
		dst[i] = byte('0' + n%10)
		n /= 10
	}
	return dst
}

// EachElement validates arr as one JSON array (surrounding whitespace
// allowed) and calls fn with the raw bytes of each element, in order, until
// fn returns false. It reports whether arr is a valid array; when fn stops
// early the rest is not validated. It does not allocate. Safe for concurrent
// use.
func EachElement(arr []byte, fn func(elem []byte) bool) bool {
	i := skipJSONSpace(arr, 0)
	if i >= len(arr) || arr[i] != '[' {
		return false
	}
	i = skipJSONSpace(arr, i+1)
	if i < len(arr) && arr[i] == ']' {
		return skipJSONSpace(arr, i+1) == len(arr)
	}
	for i < len(arr) {
		e := skipJSONValue(arr, i, 1)
		if e < 0 {
			return false
		}
		if !fn(arr[i:e]) {
			return true
		}
		var end, ok bool
		if i, end, ok = nextItem(arr, e, ']'); end {
			return ok
		}
	}
	return false
}

// Message is the raw top-level members of a JSON-RPC 2.0 message that a
// proxy or a worker acts on (ParseMessage); nil where absent.
type Message struct {
	ID, Method, Params, Result, Error []byte
}

// ParseMessage reads msg as one JSON object with "jsonrpc":"2.0" and
// returns its id, method, params, result and error members as raw values
// (the last of a repeated member); false when msg is not such an object.
// It does not allocate. Safe for concurrent use.
func ParseMessage(msg []byte) (Message, bool) {
	if m, ok := scanCanonicalAnswer(msg); ok {
		return m, true
	}
	return parseMessageGeneral(msg)
}

const (
	canonResult = `,"result":`
	canonError  = `,"error":`
)

// scanCanonicalAnswer is ParseMessage's fast path, for the answers servers
// usually write (edge's own upstream side among them):
//
//	{"jsonrpc":"2.0","id":<id>,"result":<value>}   or   ,"error":<value>}
//
// with no whitespace outside the value, an integer id or a string id without
// escapes, and nothing but whitespace after the closing brace. The value is
// validated as the general path does; anything else goes to the general
// path, which returns the same Message for every message this accepts
// (FuzzParseMessageFastPath).
func scanCanonicalAnswer(b []byte) (Message, bool) {
	if len(b) <= canonIDStart || string(b[:canonJSONRPCEnd]) != canonJSONRPC ||
		string(b[canonJSONRPCEnd:canonIDStart]) != canonID {
		return Message{}, false
	}
	var ie int
	if b[canonIDStart] == '"' {
		ie = scanPlainString(b, canonIDStart)
	} else {
		ie = scanPlainInt(b, canonIDStart)
	}
	if ie < 0 {
		return Message{}, false
	}
	var vs int
	result := false
	switch rest := b[ie:]; {
	case len(rest) > len(canonResult) && string(rest[:len(canonResult)]) == canonResult:
		vs, result = ie+len(canonResult), true
	case len(rest) > len(canonError) && string(rest[:len(canonError)]) == canonError:
		vs = ie + len(canonError)
	default:
		return Message{}, false
	}
	var ve int
	if b[vs] == '{' {
		ve = skipParamsObject(b, vs)
	} else {
		ve = skipJSONValue(b, vs, 1)
	}
	if ve < 0 || ve >= len(b) || b[ve] != '}' || skipJSONSpace(b, ve+1) != len(b) {
		return Message{}, false
	}
	m := Message{ID: b[canonIDStart:ie]}
	if result {
		m.Result = b[vs:ve]
	} else {
		m.Error = b[vs:ve]
	}
	return m, true
}

// parseMessageGeneral is ParseMessage for any member order and spacing.
func parseMessageGeneral(msg []byte) (Message, bool) {
	var m Message
	v20 := false
	ok := EachMember(msg, func(k, v []byte) bool {
		switch {
		case KeyIs(k, "id"):
			m.ID = v
		case KeyIs(k, "method"):
			m.Method = v
		case KeyIs(k, "params"):
			m.Params = v
		case KeyIs(k, "result"):
			m.Result = v
		case KeyIs(k, "error"):
			m.Error = v
		case KeyIs(k, "jsonrpc"):
			v20 = string(v) == `"2.0"`
		}
		return true
	})
	return m, ok && v20
}
