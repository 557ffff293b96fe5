//go:build race

package sidecar

// raceEnabled is whether the race detector is on: it slows every
// goroutine several times, which a test of timing under load must know.
const raceEnabled = true
