package upstream

import "github.com/openengine/edge/bytestream"

// The byte-stream connections of an Upstream run on the gateway's event
// loops (package bytestream): these are its names here.
type (
	Loops    = bytestream.Loops
	Wire     = bytestream.Wire
	WireConn = bytestream.WireConn
)
