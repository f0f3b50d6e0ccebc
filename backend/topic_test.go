package backend

import (
	"bytes"
	"context"
	"testing"
)

// keepStream is a Stream and SharedEmitter that keeps the bodies handed to
// it by EmitShared and counts those given to Emit.
type keepStream struct {
	copied int
	kept   [][]byte
}

func (*keepStream) ID() string                                      { return "k" }
func (*keepStream) Namespace() string                               { return "" }
func (*keepStream) Establish([]byte)                                {}
func (s *keepStream) Emit(_, _ []byte) bool                         { s.copied++; return true }
func (s *keepStream) EmitWait(context.Context, []byte, []byte) bool { s.copied++; return true }
func (s *keepStream) EmitShared(_, body []byte) bool {
	s.kept = append(s.kept, body)
	return true
}

// copyStream is a Stream that is not a SharedEmitter.
type copyStream struct{ bodies [][]byte }

func (*copyStream) ID() string        { return "c" }
func (*copyStream) Namespace() string { return "" }
func (*copyStream) Establish([]byte)  {}
func (s *copyStream) Emit(_, body []byte) bool {
	s.bodies = append(s.bodies, append([]byte(nil), body...))
	return true
}
func (s *copyStream) EmitWait(_ context.Context, c, b []byte) bool { return s.Emit(c, b) }

// TestFanoutMembers: members join once, leave from any position (the last
// one takes the slot), and every member left gets each event: the
// SharedEmitters one shared encoding, the others a copy.
func TestFanoutMembers(t *testing.T) {
	var f Fanout
	keep := []*keepStream{{}, {}, {}, {}}
	plain := &copyStream{}
	for _, s := range keep {
		f.Join(s)
	}
	if n := f.Join(plain); n != 5 {
		t.Fatalf("Join: %d members, want 5", n)
	}
	if n := f.Join(keep[0]); n != 5 {
		t.Fatalf("a second Join of a member: %d members, want 5", n)
	}
	if n := f.Leave(keep[1]); n != 4 {
		t.Fatalf("Leave: %d members, want 4", n)
	}
	if n := f.Leave(keep[1]); n != 4 {
		t.Fatalf("Leave of a non-member: %d members, want 4", n)
	}
	if n := f.Publish([]byte(`{"x":1}`)); n != 4 {
		t.Fatalf("Publish delivered %d, want 4", n)
	}
	if n := f.Leave(plain); n != 3 {
		t.Fatalf("Leave: %d members, want 3", n)
	}
	if n := f.Publish(nil); n != 3 {
		t.Fatalf("Publish delivered %d, want 3", n)
	}
	want := [][]byte{[]byte(`"cursor":"1","seq":1,"data":{"x":1}`), []byte(`"cursor":"2","seq":2,"data":null`)}
	for i, s := range keep {
		if i == 1 {
			if len(s.kept) != 0 {
				t.Fatalf("a member that left got %d events", len(s.kept))
			}
			continue
		}
		if s.copied != 0 || len(s.kept) != 2 {
			t.Fatalf("member %d: %d copied, %d kept; want 2 kept", i, s.copied, len(s.kept))
		}
		for j, body := range s.kept {
			if !bytes.Equal(body, want[j]) {
				t.Fatalf("member %d, event %d: %q, want %q", i, j+1, body, want[j])
			}
			if &body[0] != &keep[0].kept[j][0] {
				t.Fatalf("member %d, event %d: not the shared encoding", i, j+1)
			}
		}
	}
	if len(plain.bodies) != 1 || !bytes.Equal(plain.bodies[0], want[0]) {
		t.Fatalf("the copying member got %q, want the first event", plain.bodies)
	}
}
