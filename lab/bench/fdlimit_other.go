//go:build !unix

package bench

func openFileLimit() int { return fallbackFileLimit }
