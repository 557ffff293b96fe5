//go:build !race

package sidecar

// raceEnabled is whether the race detector is on (see race_test.go).
const raceEnabled = false
