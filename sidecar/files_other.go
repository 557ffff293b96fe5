//go:build !unix

package sidecar

// openFileLimit is 0: no limit is known on this platform.
func openFileLimit() int { return 0 }
