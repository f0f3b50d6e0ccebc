//go:build !race

package test

// raceEnabled reports whether the race detector is on: load tests scale
// down under it, which makes them several times slower.
const raceEnabled = false
