//go:build unix

package sidecar

import "syscall"

// openFileLimit is the process's soft limit on open files, 0 when there is
// none (or none that could bind: above 2^30, as RLIM_INFINITY is). The Go runtime has raised it to the hard limit by now.
func openFileLimit() int {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil || l.Cur > 1<<30 {
		return 0
	}
	return int(l.Cur)
}
