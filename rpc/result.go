package rpc

import "github.com/openengine/edge/codec"

// ResultSink is implemented by a Sink that encodes a success response
// straight into its output: a proxied answer's result then goes from the
// upstream's read buffer to the client's output in one copy, where
// Send(codec.AppendResult(...)) copies it into the session's scratch
// first.
type ResultSink interface {
	Sink
	// SendResult queues the response {"jsonrpc":"2.0","id":ID,"result":RESULT}
	// exactly as Send(codec.AppendResult(nil, id, result)) would (framed,
	// checked against the hard cap): codec.ResultSize tells its length
	// before it is encoded. id and result are valid only during the call.
	SendResult(id, result []byte)
}

// sendResult answers id with result: through the sink's SendResult where
// nothing else has to see the message (no batch collecting it, no
// subscriptions whose budget it counts against, no deferred events that
// must be written before it), else encoded in s.buf and sent.
func (s *Session) sendResult(id, result []byte) {
	if rs, ok := s.sink.(ResultSink); ok && s.collect == nil && s.budget == nil && len(s.ready) == 0 {
		rs.SendResult(id, result)
		return
	}
	s.buf = codec.AppendResult(s.buf[:0], id, result)
	s.send(s.buf)
}
