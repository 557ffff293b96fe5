//go:build unix

package proxy

import (
	"syscall"
	"testing"
	"time"
)

// cpuNow is the process's CPU time, user and system.
func cpuNow(b testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
