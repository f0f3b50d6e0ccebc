package load

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strconv"
)

// Kind says what a server message is, as far as the generator cares.
type Kind uint8

// Kinds of server message.
const (
	KindOther  Kind = iota // anything else (ignored)
	KindReply              // a successful response to one of our requests
	KindError              // an error response (ID set when the server echoed one)
	KindEvent              // a subscription event or push
	KindClosed             // the server ended a subscription
	KindPing               // an application-level ping; answer with Dialect.PingReply
)

// Msg is the classification of one server message.
type Msg struct {
	Kind  Kind
	HasID bool
	ID    uint64
}

// HelloID is the id of the dialect's hello message (outside the range of
// request ids, which start at IDBase).
const HelloID = 1

// Dialect builds request payloads for one server's protocol and recognises
// its replies and notifications. Payload builders are called once per
// template; Classify is on the hot path and must not allocate. Safe for
// concurrent use.
type Dialect interface {
	// Name is the dialect's name (jsonrpc, raw, geth, centrifuge).
	Name() string
	// Hello is the first message after the upgrade, answered by a reply with
	// id HelloID; nil when the protocol has none.
	Hello() []byte
	// Echo is a unary call whose result is params; it returns the payload and
	// the offset of the IDWidth id digits.
	Echo(params []byte) ([]byte, int)
	// Subscribe subscribes to topic; ok is false when the peer cannot.
	Subscribe(topic string) (payload []byte, idOff int, ok bool)
	// Publish publishes data to topic; ok is false when the peer cannot.
	Publish(topic string, data []byte) (payload []byte, idOff int, ok bool)
	// Classify classifies one server message without allocating.
	Classify(msg []byte) Msg
	// PingReply answers a KindPing message.
	PingReply() []byte
	// MultiPerFrame reports whether one frame may carry several
	// newline-separated messages.
	MultiPerFrame() bool
}

// DialectFor returns the dialect of a peer name: edge, nbio and gorilla speak
// jsonrpc; raw, geth and centrifuge speak their own.
func DialectFor(peer string) (Dialect, error) {
	switch peer {
	case "edge", "nbio", "gorilla", "jsonrpc":
		return JSONRPC{}, nil
	case "raw":
		return Raw{}, nil
	case "geth":
		return Geth{}, nil
	case "centrifuge":
		return Centrifuge{}, nil
	}
	return nil, fmt.Errorf("load: unknown dialect for peer %q", peer)
}

var idPlaceholder = strconv.AppendUint(nil, IDBase, 10)

// withID returns prefix+id+suffix and the id's offset.
func withID(prefix string, suffix ...[]byte) ([]byte, int) {
	b := append([]byte(prefix), idPlaceholder...)
	for _, s := range suffix {
		b = append(b, s...)
	}
	return b, len(prefix)
}

// Params returns a JSON object of exactly size bytes ({"p":"xxx..."}, at
// least 8 bytes), the echo params of the unary workloads.
func Params(size int) []byte {
	size = max(size, 8)
	b := append([]byte(`{"p":"`), bytes.Repeat([]byte("x"), size-8)...)
	return append(b, `"}`...)
}

// EchoOfSize returns an echo request payload of exactly total bytes (the
// whole message, envelope included) and its id offset.
func EchoOfSize(d Dialect, total int) ([]byte, int) {
	p, _ := d.Echo(Params(8))
	overhead := len(p) - 8
	return d.Echo(Params(max(total-overhead, 8)))
}

// EventData returns the data object published in the fan-out workload: a
// TimeWidth-digit timestamp field "t" padded to size bytes, and the offset of
// the timestamp digits within it.
func EventData(size int) ([]byte, int) {
	b := append([]byte(`{"t":`), strconv.AppendUint(nil, TimeBase, 10)...)
	b = append(b, `,"p":"`...)
	pad := max(size-len(b)-2, 0)
	b = append(b, bytes.Repeat([]byte("x"), pad)...)
	return append(b, `"}`...), len(`{"t":`)
}

// JSONRPC is the dialect of edge and of the jsonrpc peers (gorilla, nbio):
// edge/echo, edge/topic, edge/publish with named params.
type JSONRPC struct{}

func (JSONRPC) Name() string        { return "jsonrpc" }
func (JSONRPC) Hello() []byte       { return nil }
func (JSONRPC) PingReply() []byte   { return nil }
func (JSONRPC) MultiPerFrame() bool { return false }

func (JSONRPC) Echo(params []byte) ([]byte, int) {
	return withID(`{"jsonrpc":"2.0","id":`, []byte(`,"method":"edge/echo","params":`), params, []byte(`}`))
}

func (JSONRPC) Subscribe(topic string) ([]byte, int, bool) {
	p, off := withID(`{"jsonrpc":"2.0","id":`, []byte(`,"method":"edge/topic","params":{"name":`+strconv.Quote(topic)+`}}`))
	return p, off, true
}

func (JSONRPC) Publish(topic string, data []byte) ([]byte, int, bool) {
	p, off := withID(`{"jsonrpc":"2.0","id":`, []byte(`,"method":"edge/publish","params":{"name":`+strconv.Quote(topic)+`,"data":`), data, []byte(`}}`))
	return p, off, true
}

// Call builds an arbitrary edge request (edge/sleep, edge/stats).
func (JSONRPC) Call(method string, params []byte) ([]byte, int) {
	return withID(`{"jsonrpc":"2.0","id":`, []byte(`,"method":`+strconv.Quote(method)+`,"params":`), params, []byte(`}`))
}

// Cancel builds edge's $/cancelRequest notification for an id, with the id
// digits at the returned offset.
func (JSONRPC) Cancel() ([]byte, int) {
	return withID(`{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":`, []byte(`}}`))
}

func (JSONRPC) Classify(msg []byte) Msg { return classifyJSONRPC(msg, "") }

// fastID recognises the exact shape prefix+digits+`,"`+key+`":` that edge
// and most servers produce, without scanning the rest; key is the member
// after the id. ok is false when msg has another shape.
func fastID(msg []byte, prefix string) (id uint64, key []byte, ok bool) {
	if len(msg) < len(prefix)+4 || string(msg[:len(prefix)]) != prefix {
		return 0, nil, false
	}
	i := len(prefix)
	n := 0
	for ; i < len(msg) && msg[i] >= '0' && msg[i] <= '9' && n < 19; i++ {
		id = id*10 + uint64(msg[i]-'0')
		n++
	}
	if n == 0 || i+2 >= len(msg) || msg[i] != ',' || msg[i+1] != '"' {
		return 0, nil, false
	}
	rest := msg[i+2:]
	j := bytes.IndexByte(rest, '"')
	if j < 0 || j+1 >= len(rest) || rest[j+1] != ':' {
		return 0, nil, false
	}
	return id, rest[:j], true
}

const jsonrpcPrefix = `{"jsonrpc":"2.0","id":`

// The exact reply shapes, as words for fastReply: jsonrpcPrefix (22 bytes:
// 8-byte words at 0, 8 and 14, overlapping), then after the IDWidth id digits
// a 10-byte member key (a word and a 2-byte tail): `,"result":` in edge's
// replies, `,"method":` in the requests the raw peer echoes.
var (
	prefixW0, prefixW1, prefixW2 = le64(jsonrpcPrefix[0:]), le64(jsonrpcPrefix[8:]), le64(jsonrpcPrefix[14:])
	resultKey                    = keyOf(`,"result":`)
	methodKey                    = keyOf(`,"method":`)
)

func le64(s string) uint64 { return binary.LittleEndian.Uint64([]byte(s[:8])) }

// keyWords is a 10-byte member key as fastReply compares it.
type keyWords struct {
	w    uint64
	tail uint16
}

func keyOf(s string) keyWords {
	return keyWords{le64(s), binary.LittleEndian.Uint16([]byte(s[8:10]))}
}

// fastReplyLen is the length of jsonrpcPrefix, the id digits and a key.
const fastReplyLen = len(jsonrpcPrefix) + IDWidth + 10

// fastReply recognises the one shape of nearly every message the generator
// reads: jsonrpcPrefix, exactly IDWidth digits (the generator's own ids) and
// key, with a few word compares and no loop. ok is false for any other
// message, which then goes through fastID and the scanner; when ok is true
// fastID finds the same id and the key's name (TestFastReply, FuzzFastReply).
func fastReply(msg []byte, key keyWords) (id uint64, ok bool) {
	if len(msg) < fastReplyLen {
		return 0, false
	}
	const p = len(jsonrpcPrefix)
	if binary.LittleEndian.Uint64(msg[0:]) != prefixW0 || binary.LittleEndian.Uint64(msg[8:]) != prefixW1 ||
		binary.LittleEndian.Uint64(msg[14:]) != prefixW2 ||
		binary.LittleEndian.Uint64(msg[p+IDWidth:]) != key.w || binary.LittleEndian.Uint16(msg[p+IDWidth+8:]) != key.tail {
		return 0, false
	}
	return parseID(msg[p : p+IDWidth])
}

// parseID parses exactly IDWidth ASCII digits: the first eight as one word
// (SWAR), then two. ok is false when one of them is not a digit.
func parseID(b []byte) (uint64, bool) {
	_ = b[IDWidth-1]
	v := binary.LittleEndian.Uint64(b)
	// Every byte 0x30..0x39: its high nibble is 3, and adding 6 keeps it 3.
	if (v&0xf0f0f0f0f0f0f0f0)|((v+0x0606060606060606)&0xf0f0f0f0f0f0f0f0)>>4 != 0x3333333333333333 {
		return 0, false
	}
	d8, d9 := b[8]-'0', b[9]-'0'
	if d8 > 9 || d9 > 9 {
		return 0, false
	}
	v -= 0x3030303030303030
	v = v*10 + v>>8 // byte pairs: 2-digit values in bytes 0, 2, 4, 6
	v = ((v&0x000000ff000000ff)*(100+1000000<<32) + (v>>16&0x000000ff000000ff)*(1+10000<<32)) >> 32
	return v*100 + uint64(d8)*10 + uint64(d9), true
}

// classifyJSONRPC recognises responses by their top-level id and
// result/error members and notifications by their method. closedMethod names
// the notification that ends a subscription ("" for edge's
// subscription/closed).
func classifyJSONRPC(msg []byte, closedMethod string) Msg {
	if id, ok := fastReply(msg, resultKey); ok {
		return Msg{Kind: KindReply, HasID: true, ID: id}
	}
	return classifyJSONRPCGeneral(msg, closedMethod)
}

// classifyJSONRPCGeneral is classifyJSONRPC without fastReply.
func classifyJSONRPCGeneral(msg []byte, closedMethod string) Msg {
	if id, key, ok := fastID(msg, jsonrpcPrefix); ok {
		switch string(key) {
		case "result":
			return Msg{Kind: KindReply, HasID: true, ID: id}
		case "error":
			return Msg{Kind: KindError, HasID: true, ID: id}
		}
	}
	s := objScanner{b: msg}
	if !s.open() {
		return Msg{}
	}
	var m Msg
	for {
		key, ok := s.next()
		if !ok {
			break
		}
		switch string(key) {
		case "id":
			m.ID, m.HasID = s.uint()
		case "result":
			m.Kind = KindReply
			if m.HasID {
				return m
			}
			s.skip()
		case "error":
			m.Kind = KindError
			if m.HasID {
				return m
			}
			s.skip()
		case "method":
			if m.HasID {
				return Msg{} // a request, not a response
			}
			name, _ := s.str()
			if string(name) == "subscription/closed" || (closedMethod != "" && string(name) == closedMethod) {
				return Msg{Kind: KindClosed}
			}
			return Msg{Kind: KindEvent}
		default:
			if !s.skip() {
				return m
			}
		}
	}
	return m
}

// Raw is the dialect of the raw peer, which echoes every text frame back
// unchanged: requests are edge/echo envelopes and the echoed request counts
// as the reply.
type Raw struct{}

func (Raw) Name() string                               { return "raw" }
func (Raw) Hello() []byte                              { return nil }
func (Raw) PingReply() []byte                          { return nil }
func (Raw) MultiPerFrame() bool                        { return false }
func (Raw) Echo(params []byte) ([]byte, int)           { return JSONRPC{}.Echo(params) }
func (Raw) Subscribe(string) ([]byte, int, bool)       { return nil, 0, false }
func (Raw) Publish(string, []byte) ([]byte, int, bool) { return nil, 0, false }

func (Raw) Classify(msg []byte) Msg {
	if id, ok := fastReply(msg, methodKey); ok {
		return Msg{Kind: KindReply, HasID: true, ID: id}
	}
	return classifyRawGeneral(msg)
}

// classifyRawGeneral is Raw.Classify without fastReply.
func classifyRawGeneral(msg []byte) Msg {
	if id, _, ok := fastID(msg, jsonrpcPrefix); ok {
		return Msg{Kind: KindReply, HasID: true, ID: id}
	}
	s := objScanner{b: msg}
	if !s.open() {
		return Msg{}
	}
	for {
		key, ok := s.next()
		if !ok {
			return Msg{}
		}
		if string(key) == "id" {
			id, ok := s.uint()
			return Msg{Kind: KindReply, HasID: ok, ID: id}
		}
		if !s.skip() {
			return Msg{}
		}
	}
}

// Geth is the dialect of go-ethereum's rpc package: positional params,
// edge_echo, edge_subscribe ["topic",name], edge_publish [name,data] and
// edge_subscription notifications.
type Geth struct{}

func (Geth) Name() string        { return "geth" }
func (Geth) Hello() []byte       { return nil }
func (Geth) PingReply() []byte   { return nil }
func (Geth) MultiPerFrame() bool { return false }

func (Geth) Echo(params []byte) ([]byte, int) {
	return withID(`{"jsonrpc":"2.0","id":`, []byte(`,"method":"edge_echo","params":[`), params, []byte(`]}`))
}

func (Geth) Subscribe(topic string) ([]byte, int, bool) {
	p, off := withID(`{"jsonrpc":"2.0","id":`, []byte(`,"method":"edge_subscribe","params":["topic",`+strconv.Quote(topic)+`]}`))
	return p, off, true
}

func (Geth) Publish(topic string, data []byte) ([]byte, int, bool) {
	p, off := withID(`{"jsonrpc":"2.0","id":`, []byte(`,"method":"edge_publish","params":[`+strconv.Quote(topic)+`,`), data, []byte(`]}`))
	return p, off, true
}

func (Geth) Classify(msg []byte) Msg { return classifyJSONRPC(msg, "") }

// Centrifuge is the dialect of centrifugal/centrifuge's JSON protocol (client
// protocol v2): a connect command first, rpc/subscribe/publish commands, push
// messages, {} pings, and several messages per frame.
type Centrifuge struct{}

func (Centrifuge) Name() string        { return "centrifuge" }
func (Centrifuge) Hello() []byte       { return []byte(`{"id":1,"connect":{}}`) }
func (Centrifuge) PingReply() []byte   { return []byte(`{}`) }
func (Centrifuge) MultiPerFrame() bool { return true }

func (Centrifuge) Echo(params []byte) ([]byte, int) {
	return withID(`{"id":`, []byte(`,"rpc":{"method":"echo","data":`), params, []byte(`}}`))
}

func (Centrifuge) Subscribe(topic string) ([]byte, int, bool) {
	p, off := withID(`{"id":`, []byte(`,"subscribe":{"channel":`+strconv.Quote(topic)+`}}`))
	return p, off, true
}

func (Centrifuge) Publish(topic string, data []byte) ([]byte, int, bool) {
	p, off := withID(`{"id":`, []byte(`,"publish":{"channel":`+strconv.Quote(topic)+`,"data":`), data, []byte(`}}`))
	return p, off, true
}

func (Centrifuge) Classify(msg []byte) Msg {
	if id, key, ok := fastID(msg, `{"id":`); ok {
		if string(key) == "error" {
			return Msg{Kind: KindError, HasID: true, ID: id}
		}
		return Msg{Kind: KindReply, HasID: true, ID: id}
	}
	s := objScanner{b: msg}
	if !s.open() {
		return Msg{}
	}
	var m Msg
	members := 0
	for {
		key, ok := s.next()
		if !ok {
			break
		}
		members++
		switch string(key) {
		case "id":
			m.ID, m.HasID = s.uint()
			continue
		case "error":
			m.Kind = KindError
		case "push":
			return Msg{Kind: KindEvent}
		default:
			if m.Kind == KindOther {
				m.Kind = KindReply
			}
		}
		if m.HasID {
			return m
		}
		if !s.skip() {
			break
		}
	}
	if members == 0 {
		return Msg{Kind: KindPing}
	}
	if m.HasID && m.Kind == KindOther {
		m.Kind = KindReply // {"id":N}: a reply with an empty result
	}
	return m
}
