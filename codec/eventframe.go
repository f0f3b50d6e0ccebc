package codec

import "github.com/gobwas/ws"

// EventHead is the beginning of an OECP subscription event up to its id,
// the head AppendEvent gives AppendEventWith (CONTRACT.md section 5).
const EventHead = eventHead

// EventLen is the length of the notification AppendEventWith(dst, head, id,
// members) appends.
func EventLen(head string, id, members []byte) int {
	n := len(head) + len(id) + len("}}")
	if len(members) > 0 {
		n += 1 + len(members)
	}
	return n
}

// AppendEventFrame appends the event AppendEventWith encodes as one whole
// server-to-client text frame: its header, then the notification written in
// place. A transport that frames events as it writes them copies each
// event's members once, from the subscription's buffer straight into its
// output. It does not allocate when dst has room. Safe for concurrent use.
func AppendEventFrame(dst []byte, head string, id, members []byte) []byte {
	dst = AppendFrameHeader(dst, ws.OpText, EventLen(head, id, members))
	return AppendEventWith(dst, head, id, members)
}
