package loop

import (
	"bytes"
	"testing"
)

// TestCloseCauses pins what each close cause puts on the wire (CONTRACT.md
// section 1.1: 1008 "slow consumer", 1001 "going away"; 1001 "idle timeout")
// and what it does with the turn's output and the TCP connection.
func TestCloseCauses(t *testing.T) {
	queued := []byte("queued")
	tests := []struct {
		name   string
		cause  closeCause
		want   []byte // the turn's output after the close
		hangup bool
	}{
		{"slow consumer", causeSlowConsumer, append([]byte{0x88, 15, 0x03, 0xf0}, "slow consumer"...), true},
		{"idle", causeIdle, append([]byte{0x88, 14, 0x03, 0xe9}, "idle timeout"...), true},
		{"going away", causeGoingAway, append(append([]byte("queued"), 0x88, 12, 0x03, 0xe9), "going away"...), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := Config{}.withDefaults()
			l := &eventLoop{srv: &Server{cfg: cfg}, spareMax: cfg.SpareOutputBytes}
			w := &conn{l: l, proto: protoWebSocket, state: stateOpen}
			w.sess = echo{w}
			w.out = append(w.output(), queued...)
			w.closeFor(tt.cause)
			if !bytes.Equal(w.out, tt.want) {
				t.Errorf("output %q, want %q", w.out, tt.want)
			}
			if w.state != stateClosing || w.hangup != tt.hangup {
				t.Errorf("state %s hangup %v, want closing hangup %v", w.state, w.hangup, tt.hangup)
			}
		})
	}
}
