package codec

import (
	"testing"
)

// TestSubscriptionNotifications pins the bytes of the two notifications a
// subscription sends (CONTRACT.md section 5) and checks that they are the
// notification envelope AppendNotification writes, with the params built in
// place.
func TestSubscriptionNotifications(t *testing.T) {
	tests := []struct {
		name     string
		got      []byte
		envelope []byte // the same notification from AppendNotification
		want     string
	}{
		{"event", AppendEvent(nil, []byte(`"s1"`), []byte(`"cursor":"3","seq":3`)),
			AppendNotification(nil, "event", []byte(`{"subscriptionId":"s1","cursor":"3","seq":3}`)),
			`{"jsonrpc":"2.0","method":"event","params":{"subscriptionId":"s1","cursor":"3","seq":3}}`},
		{"event without members", AppendEvent(nil, []byte(`"s1"`), nil),
			AppendNotification(nil, "event", []byte(`{"subscriptionId":"s1"}`)),
			`{"jsonrpc":"2.0","method":"event","params":{"subscriptionId":"s1"}}`},
		{"event appends", AppendEvent([]byte("x"), []byte(`"s2"`), []byte(`"seq":1`)),
			AppendNotification([]byte("x"), "event", []byte(`{"subscriptionId":"s2","seq":1}`)),
			`x{"jsonrpc":"2.0","method":"event","params":{"subscriptionId":"s2","seq":1}}`},
		{"closed done", AppendSubscriptionClosed(nil, []byte(`"s1"`), "done", nil),
			AppendNotification(nil, "subscription/closed", []byte(`{"subscriptionId":"s1","reason":"done"}`)),
			`{"jsonrpc":"2.0","method":"subscription/closed","params":{"subscriptionId":"s1","reason":"done"}}`},
		{"closed with cursor", AppendSubscriptionClosed(nil, []byte(`"s9"`), "SLOW_CONSUMER", []byte(`"17"`)),
			AppendNotification(nil, "subscription/closed", []byte(`{"subscriptionId":"s9","reason":"SLOW_CONSUMER","lastDeliveredCursor":"17"}`)),
			`{"jsonrpc":"2.0","method":"subscription/closed","params":{"subscriptionId":"s9","reason":"SLOW_CONSUMER","lastDeliveredCursor":"17"}}`},
		{"closed reason escaped", AppendSubscriptionClosed(nil, []byte(`"s1"`), "a\"b", nil),
			AppendNotification(nil, "subscription/closed", []byte(`{"subscriptionId":"s1","reason":"a\"b"}`)),
			`{"jsonrpc":"2.0","method":"subscription/closed","params":{"subscriptionId":"s1","reason":"a\"b"}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if string(tt.got) != tt.want {
				t.Errorf("got  %s\nwant %s", tt.got, tt.want)
			}
			if string(tt.envelope) != tt.want {
				t.Errorf("AppendNotification writes %s", tt.envelope)
			}
		})
	}
}

// TestSubscriptionNotificationsDoNotAllocate: events are the fan-out's hot
// path; with room in dst neither encoder allocates.
func TestSubscriptionNotificationsDoNotAllocate(t *testing.T) {
	buf := make([]byte, 0, 256)
	id, members, cursor := []byte(`"s1"`), []byte(`"cursor":"3","seq":3`), []byte(`"3"`)
	if n := testing.AllocsPerRun(100, func() {
		buf = AppendEvent(buf[:0], id, members)
		buf = AppendSubscriptionClosed(buf[:0], id, "SLOW_CONSUMER", cursor)
	}); n != 0 {
		t.Fatalf("%v allocations per event and close", n)
	}
}

func BenchmarkAppendEvent(b *testing.B) {
	id, members := []byte(`"s-1"`), []byte(`"cursor":"17","seq":17`)
	buf := make([]byte, 0, 256)
	b.ReportAllocs()
	b.SetBytes(int64(len(AppendEvent(nil, id, members))))
	for b.Loop() {
		buf = AppendEvent(buf[:0], id, members)
	}
}
