package codec

import (
	"strconv"
	"unicode/utf8"
)

// Code is a JSON-RPC 2.0 error code (JSON-RPC 2.0 section 5.1, CONTRACT.md
// section 7).
type Code int

// Error codes edge sends.
const (
	CodeParseError       Code = -32700 // not JSON; NDJSON over-long line
	CodeInvalidRequest   Code = -32600 // section 2.4 failure; duplicate request id
	CodeMethodNotFound   Code = -32601 // unknown method; subscription method on the unary path
	CodeInvalidParams    Code = -32602 // params not an object; backend decode failure
	CodeInternalError    Code = -32603 // backend internal error or panic
	CodeServerError      Code = -32000 // application errors, Server busy, shutdown, version
	CodeRequestCancelled Code = -32800 // only with --cancel-reply=error
)

// Message returns the contract's fixed message for c, or "" for
// CodeServerError and unknown codes, whose message comes from the backend.
// Safe for concurrent use.
func (c Code) Message() string {
	switch c {
	case CodeParseError:
		return "Parse error"
	case CodeInvalidRequest:
		return "Invalid Request"
	case CodeMethodNotFound:
		return "Method not found"
	case CodeInvalidParams:
		return "Invalid params"
	case CodeInternalError:
		return "Internal error"
	case CodeRequestCancelled:
		return "Request cancelled"
	}
	return ""
}

// AppendResult appends the success response
// {"jsonrpc":"2.0","id":<id>,"result":<result>} (CONTRACT.md section 7) to dst.
// id and result are raw JSON and are copied as they are; nil or empty stands
// for null (an empty result, such as edge/echo's without params, is never
// written as nothing). It does not allocate when dst has room. Safe for concurrent use.
func AppendResult(dst, id, result []byte) []byte {
	dst = append(dst, `{"jsonrpc":"2.0","id":`...)
	dst = appendRaw(dst, id)
	dst = append(dst, `,"result":`...)
	dst = appendRaw(dst, result)
	return append(dst, '}')
}

// ResultSize is the length of what AppendResult appends for id and result,
// so that a transport can write a frame's header before the response
// itself (and build it in place, with no copy in between). Safe for
// concurrent use.
func ResultSize(id, result []byte) int {
	return len(`{"jsonrpc":"2.0","id":`) + rawSize(id) + len(`,"result":`) + rawSize(result) + 1
}

// rawSize is the length appendRaw appends for v.
func rawSize(v []byte) int {
	if len(v) == 0 {
		return len("null")
	}
	return len(v)
}

// AppendError appends the error response
// {"jsonrpc":"2.0","id":<id|null>,"error":{"code":<code>,"message":<message>[,"data":{"code":<dataCode>[,"details":<details>]}]}}
// (CONTRACT.md section 7) to dst. id is the raw id token, nil for null.
// message and dataCode are arbitrary text and are JSON-escaped. dataCode ""
// omits data; details (raw JSON) nil omits details, and details are only
// written inside data, so they are dropped when dataCode is "". It does not
// allocate when dst has room. Safe for concurrent use.
func AppendError(dst, id []byte, code Code, message, dataCode string, details []byte) []byte {
	dst = append(dst, `{"jsonrpc":"2.0","id":`...)
	dst = appendRaw(dst, id)
	dst = appendErrorMember(dst, code, message, dataCode, details)
	return append(dst, '}')
}

// appendErrorMember appends ,"error":{"code":<code>,"message":<message>
// [,"data":{"code":<dataCode>[,"details":<details>]}]}: the error object
// of a response and of a plain subscription's error notification.
func appendErrorMember(dst []byte, code Code, message, dataCode string, details []byte) []byte {
	dst = append(dst, `,"error":{"code":`...)
	dst = appendCode(dst, code)
	dst = append(dst, `,"message":`...)
	dst = AppendQuote(dst, message)
	if dataCode != "" {
		dst = append(dst, `,"data":{"code":`...)
		dst = AppendQuote(dst, dataCode)
		if details != nil {
			dst = append(dst, `,"details":`...)
			dst = append(dst, details...)
		}
		dst = append(dst, '}')
	}
	return append(dst, '}')
}

// The notification envelope, and its beginning for the two notifications a
// subscription sends (CONTRACT.md section 5), whose method is fixed.
const (
	notificationHead = `{"jsonrpc":"2.0","method":`
	paramsMember     = `,"params":`
	subscriptionHead = paramsMember + `{"subscriptionId":`
	eventHead        = notificationHead + `"event"` + subscriptionHead
	closedHead       = notificationHead + `"subscription/closed"` + subscriptionHead
)

// AppendNotification appends {"jsonrpc":"2.0","method":<method>,"params":<params>}
// (CONTRACT.md section 7) to dst. params is raw JSON; nil omits the member
// (JSON-RPC 2.0 section 4.2 allows no params but not a null one). It does not
// allocate when dst has room. Safe for concurrent use.
func AppendNotification(dst []byte, method string, params []byte) []byte {
	dst = append(dst, notificationHead...)
	dst = AppendQuote(dst, method)
	if params != nil {
		dst = append(dst, paramsMember...)
		dst = append(dst, params...)
	}
	return append(dst, '}')
}

// AppendEvent appends the subscription event
// {"jsonrpc":"2.0","method":"event","params":{"subscriptionId":<id>[,<members>]}}
// (CONTRACT.md section 5) to dst: the notification AppendNotification would
// write, without building its params first. id is the subscription id as a
// JSON string token; members are the event's own members of params
// (`"cursor":"3","seq":3`), raw JSON copied as they are, none when empty. It
// does not allocate when dst has room. Safe for concurrent use.
func AppendEvent(dst, id, members []byte) []byte {
	return AppendEventWith(dst, eventHead, id, members)
}

// AppendEventWith is AppendEvent with the notification's beginning up to the
// id given: head, then id, then ",members" when there are any, then "}}".
// Plain JSON-RPC subscriptions (CONTRACT.md section 10) use the head of
// PlainEventHead. It does not allocate when dst has room. Safe for
// concurrent use.
func AppendEventWith(dst []byte, head string, id, members []byte) []byte {
	dst = append(dst, head...)
	dst = append(dst, id...)
	if len(members) > 0 {
		dst = append(dst, ',')
		dst = append(dst, members...)
	}
	return append(dst, "}}"...)
}

// PlainEventHead is the beginning of a plain JSON-RPC subscription's
// notification for namespace ns, up to its id:
// {"jsonrpc":"2.0","method":"<ns>_subscription","params":{"subscription":
// (CONTRACT.md section 10). ns is JSON-escaped.
func PlainEventHead(ns string) string {
	b := append([]byte(notificationHead), AppendQuote(nil, ns+"_subscription")...)
	return string(append(b, paramsMember+`{"subscription":`...))
}

// AppendPlainError appends a plain JSON-RPC subscription's notification
// that the subscription ended with an error (CONTRACT.md section 10):
// head (PlainEventHead), id, then ,"error":{"code":<code>,"message":<message>
// [,"data":{"code":<dataCode>}]}}}. It does not allocate when dst has room.
func AppendPlainError(dst []byte, head string, id []byte, code Code, message, dataCode string) []byte {
	dst = append(dst, head...)
	dst = append(dst, id...)
	dst = appendErrorMember(dst, code, message, dataCode, nil)
	return append(dst, "}}"...)
}

// AppendSubscriptionClosed appends the notification that the server ended a
// subscription,
// {"jsonrpc":"2.0","method":"subscription/closed","params":{"subscriptionId":<id>,"reason":<reason>[,"lastDeliveredCursor":<cursor>]}}
// (CONTRACT.md section 5), to dst. id and cursor are raw JSON tokens, an
// empty cursor omits its member; reason is text and is JSON-escaped. It does
// not allocate when dst has room. Safe for concurrent use.
func AppendSubscriptionClosed(dst, id []byte, reason string, cursor []byte) []byte {
	dst = append(dst, closedHead...)
	dst = append(dst, id...)
	dst = append(dst, `,"reason":`...)
	dst = AppendQuote(dst, reason)
	if len(cursor) > 0 {
		dst = append(dst, `,"lastDeliveredCursor":`...)
		dst = append(dst, cursor...)
	}
	return append(dst, "}}"...)
}

// appendCode appends code in decimal, with the contract's codes as constants.
func appendCode(dst []byte, code Code) []byte {
	switch code {
	case CodeParseError:
		return append(dst, "-32700"...)
	case CodeInvalidRequest:
		return append(dst, "-32600"...)
	case CodeMethodNotFound:
		return append(dst, "-32601"...)
	case CodeInvalidParams:
		return append(dst, "-32602"...)
	case CodeInternalError:
		return append(dst, "-32603"...)
	case CodeServerError:
		return append(dst, "-32000"...)
	case CodeRequestCancelled:
		return append(dst, "-32800"...)
	}
	return strconv.AppendInt(dst, int64(code), 10)
}

// appendRaw appends a raw JSON value, or null when v is nil or empty (no
// JSON value is empty).
func appendRaw(dst, v []byte) []byte {
	if len(v) == 0 {
		return append(dst, "null"...)
	}
	return append(dst, v...)
}

// AppendQuote appends s as a JSON string to dst, escaped as encoding/json does
// with HTML escaping off: '"', '\\' and control characters are escaped (\b \f
// \n \r \t or \u00XX), U+2028 and U+2029 become \u2028 and \u2029, and each
// byte of invalid UTF-8 becomes \ufffd, so the output is always valid UTF-8
// (a WebSocket text frame must be, RFC 6455 section 8.1). '<', '>' and '&' are
// left alone. It does not allocate when dst has room. Safe for concurrent use.
func AppendQuote(dst []byte, s string) []byte {
	const hexDigits = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if i+8 <= len(s) { // eight safe bytes at a time, as in scanJSONString
			w := s[i : i+8]
			x := uint64(w[0]) | uint64(w[1])<<8 | uint64(w[2])<<16 | uint64(w[3])<<24 |
				uint64(w[4])<<32 | uint64(w[5])<<40 | uint64(w[6])<<48 | uint64(w[7])<<56
			if jsonStrStops(x) == 0 {
				i += 8
				continue
			}
		}
		c := s[i]
		if jsonStrSafe[c] {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
