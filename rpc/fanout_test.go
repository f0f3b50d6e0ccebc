package rpc

import "testing"

// TestTrimKeepsLiveSubscriptionRing: a subscriber never speaks, so the
// transport's sweep calls Trim on its session however many events it gets.
// Trim keeps the ring of a stream that took an event since the last trim,
// and a steady stream of events with a sweep between them allocates
// nothing; a stream that took none since the last trim is released.
func TestTrimKeepsLiveSubscriptionRing(t *testing.T) {
	st, post, sink := subscribedStream(t, 0)
	s := st.sub.task.sess
	cursor := []byte(`"1"`)
	body := []byte(`"cursor":"1","seq":1,"data":"0123456789abcdef"`)
	event := func() {
		if !st.Emit(cursor, body) {
			t.Fatal("Emit refused")
		}
		(<-post).Apply()
	}
	event()
	s.Trim()
	if st.ring == nil {
		t.Fatal("the ring of a stream that delivered an event since the last sweep was released")
	}
	if allocs := testing.AllocsPerRun(100, func() { event(); s.Trim() }); allocs != 0 {
		t.Fatalf("an event per sweep: %.1f allocations per event, want 0", allocs)
	}
	s.Trim() // a whole sweep without an event: released
	if st.ring != nil {
		t.Fatal("the ring of a stream idle for a whole sweep is still held")
	}
	if want := 1 + 1 + 100 + 1; sink.msgs != want {
		t.Fatalf("%d messages sent, want %d", sink.msgs, want)
	}
}
