package loop

import "testing"

// TestTrimSparesReleasesUnusedBuffers: a sweep releases exactly the spare
// output buffers that no turn took since the previous sweep, so a busy loop
// keeps what its turns use and a quiet one ends up holding nothing.
func TestTrimSparesReleasesUnusedBuffers(t *testing.T) {
	l := &eventLoop{}
	check := func(step string, held, bytes int) {
		t.Helper()
		if len(l.bufs) != held || l.spareBytes != bytes {
			t.Fatalf("%s: %d spares of %d bytes, want %d of %d", step, len(l.bufs), l.spareBytes, held, bytes)
		}
	}
	// A turn writing to three connections: three buffers, back as spares.
	bufs := [][]byte{l.getBuf(), l.getBuf(), l.getBuf()}
	for _, b := range bufs {
		l.putBuf(b)
	}
	check("after the first turn", 3, 3*minOutBuf)
	l.trimSpares() // they were made during this period: kept
	check("first sweep", 3, 3*minOutBuf)

	// Turns that write to one connection at a time use one spare.
	for range 5 {
		l.putBuf(l.getBuf())
	}
	l.trimSpares()
	check("after turns that needed one buffer", 1, minOutBuf)

	// A quiet period: nothing taken, everything released.
	l.trimSpares()
	check("after a quiet period", 0, 0)
	if l.bufs != nil {
		t.Fatal("a quiet loop still holds its spare slice")
	}

	// Spares past the byte budget are not kept at all.
	big := make([]byte, 0, maxSpareBuf+1)
	l.putBuf(big)
	check("an oversized buffer", 0, 0)
}
