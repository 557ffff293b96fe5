//go:build unix

package bench

import "syscall"

// openFileLimit is the process's soft limit on open files. The Go runtime
// raises it to the hard limit at start.
func openFileLimit() int {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil || l.Cur == 0 {
		return fallbackFileLimit
	}
	return int(min(l.Cur, 1<<20))
}
