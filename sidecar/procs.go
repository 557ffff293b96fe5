package sidecar

import (
	"fmt"
	"strconv"
)

// Procs is the number of Ps (GOMAXPROCS) the sidecar runs with, and where
// it came from.
//
// The sidecar keeps Go's default: every CPU the process may run on,
// bounded by its container's CPU limit (rounded up, and at least 2), and
// followed when that limit changes. Measured on 2 cores shared with the
// load and the upstream, one P was not reliably cheaper per request than
// two, at c50 or at 5000 rps (the difference changed sign from run to
// run), and under a CPU quota of half a CPU its p99 at 5000 rps was 2.5 to
// 3.7 times two Ps': a request waits whenever the one P is busy or its
// thread is descheduled (docs/results.md, GOMAXPROCS).
type Procs struct {
	N int
	// Source is "GOMAXPROCS" when the variable set N, else "Go's default".
	Source string
}

// ReadProcs reads what GOMAXPROCS (env, empty when unset) makes of the
// runtime's n (runtime.GOMAXPROCS(0)). The runtime ignores a value that
// is not a whole number above 0 and quietly takes its default; that is an
// error here instead, naming the variable, as for every LOOMGATE_ one.
func ReadProcs(env string, n int) (Procs, error) {
	if env == "" {
		return Procs{N: n, Source: "Go's default"}, nil
	}
	// Parsed as the runtime parses it, so that what is accepted here is
	// what it applied.
	if v, err := strconv.ParseInt(env, 10, 32); err != nil || v < 1 {
		return Procs{}, fmt.Errorf("GOMAXPROCS=%q: not a whole number above 0; accepted: a whole number of Ps, e.g. 2, or unset for Go's default", env)
	}
	return Procs{N: n, Source: "GOMAXPROCS"}, nil
}
