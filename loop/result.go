package loop

import (
	"github.com/gobwas/ws"

	"github.com/openengine/edge/codec"
	"github.com/openengine/edge/rpc"
)

var _ rpc.ResultSink = (*conn)(nil)

// SendResult implements rpc.ResultSink: the success response is encoded
// straight into this turn's output after its frame header (its length is
// codec.ResultSize), with the same checks and framing as Send of the same
// message, so a proxied answer's result is copied once, from the
// upstream's read buffer to here. Runs on the loop.
func (w *conn) SendResult(id, result []byte) {
	n := codec.ResultSize(id, result)
	if !w.takes(n) {
		return
	}
	out := w.output()
	if w.proto == protoWebSocket {
		w.out = codec.AppendResult(codec.AppendFrameHeader(out, ws.OpText, n), id, result)
	} else {
		w.out = append(codec.AppendResult(out, id, result), '\n')
	}
	w.l.markDirty(w)
}
