package admin

import "errors"

// Sentinel errors of package admin.
var (
	// ErrNoListen is returned by New when Config.Listen is empty.
	ErrNoListen = errors.New("admin: no listen address")
	// ErrStarted is returned by a second Start, or a Start after Shutdown.
	ErrStarted = errors.New("admin: already started")
)
