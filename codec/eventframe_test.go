package codec

import (
	"bytes"
	"strings"
	"testing"

	"github.com/gobwas/ws"
)

// TestAppendEventFrame: the frame AppendEventFrame writes is the text frame
// AppendFrame makes of AppendEventWith's notification, for each length form
// of the header, with and without members, with either head.
func TestAppendEventFrame(t *testing.T) {
	id := []byte(`"s1"`)
	for _, head := range []string{EventHead, PlainEventHead("eth")} {
		for _, n := range []int{0, 10, 100, 200, 70000} {
			var members []byte
			if n > 0 {
				members = []byte(`"data":"` + strings.Repeat("x", n) + `"`)
			}
			want := AppendFrame([]byte("x"), ws.OpText, AppendEventWith(nil, head, id, members))
			got := AppendEventFrame([]byte("x"), head, id, members)
			if !bytes.Equal(got, want) {
				t.Fatalf("head %q, %d bytes of members: got %q, want %q", head, len(members), got, want)
			}
			if l := EventLen(head, id, members); l != len(AppendEventWith(nil, head, id, members)) {
				t.Fatalf("EventLen %d, the event is %d bytes", l, len(AppendEventWith(nil, head, id, members)))
			}
		}
	}
	buf := make([]byte, 0, 256)
	if n := testing.AllocsPerRun(100, func() {
		buf = AppendEventFrame(buf[:0], EventHead, id, []byte(`"seq":1`))
	}); n != 0 {
		t.Fatalf("%v allocations with room in dst", n)
	}
}
