// Package procs chooses the Ps (GOMAXPROCS) the sidecar runs with: Go's
// default, the operator's GOMAXPROCS, or one P under a CPU limit of at
// most one CPU, read from the cgroup and followed as it changes.
package procs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Ps is the number of Ps (GOMAXPROCS) the sidecar runs with, and where
// it came from.
//
// The sidecar keeps Go's default (every CPU the process may run on,
// bounded by its container's CPU limit, rounded up and at least 2, and
// followed when that limit changes), except under a limit of at most one
// CPU, where it runs on one P (see UnderCPULimit).
type Ps struct {
	N int
	// Source is "GOMAXPROCS" when the variable set N, procsSource when
	// UnderCPULimit did, else goDefault.
	Source string
}

// Read reads what GOMAXPROCS (env, and whether it is set at all)
// makes of the runtime's n (runtime.GOMAXPROCS(0)). The runtime ignores a
// value that is not a whole number above 0, the empty one included, and
// quietly takes its default; that is an error here instead, naming the
// variable, as for every LOOMGATE_ one.
func Read(env string, set bool, n int) (Ps, error) {
	if !set {
		return Ps{N: n, Source: goDefault}, nil
	}
	if env == "" {
		// Set but empty is not unset, as with the LOOMGATE_ variables: a
		// template that cleared it meant something.
		return Ps{}, errors.New(`GOMAXPROCS="": empty; unset it for Go's default; accepted: a whole number of Ps, e.g. 2, or unset for Go's default`)
	}
	// Parsed as the runtime parses it, so that what is accepted here is
	// what it applied.
	if v, err := strconv.ParseInt(env, 10, 32); err != nil || v < 1 {
		return Ps{}, fmt.Errorf("GOMAXPROCS=%q: not a whole number above 0; accepted: a whole number of Ps, e.g. 2, or unset for Go's default", env)
	}
	return Ps{N: n, Source: "GOMAXPROCS"}, nil
}

// Where a container may use at most one CPU, the sidecar runs on one P,
// though Go's default is then 2. Measured with raw socket I/O under a CPU
// quota of half a CPU (docs/results.md, GOMAXPROCS), one P cost 20-26% less
// CPU a request than two at c50 and 11-18% less at 5000 rps, in two runs,
// with a p99 no worse: a second P buys no parallelism there, only a spinning
// thread woken to look for work each time a request wakes the first.
const onePLimit = 1.0

// The sources of Ps named in the start-up log: Go's own choice, and
// UnderCPULimit's.
const (
	goDefault   = "Go's default"
	procsSource = "CPU limit of at most one CPU"
)

// UnderCPULimit returns the Ps to run with under a CPU limit of limit CPUs
// (0: none): 1 where Go's default chose more for a limit of at most one
// CPU, and p unchanged otherwise, a GOMAXPROCS of the operator's above all.
func UnderCPULimit(p Ps, limit float64) Ps {
	if p.Source != goDefault || limit <= 0 || limit > onePLimit || p.N <= 1 {
		return p
	}
	return Ps{N: 1, Source: procsSource}
}

// ReadCPULimit returns the CPUs this process may use by its cgroup's CPU
// limit or an ancestor's, whichever is least, as Go reads it: cgroup v2's
// cpu.max, or v1's cpu.cfs_quota_us over cpu.cfs_period_us. 0 is no
// limit, or none that could be read.
func ReadCPULimit() float64 {
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return 0
	}
	// Where the container's cgroup is mounted (sidecar.DefaultCgroupRoot).
	return cpuLimit("/sys/fs/cgroup", string(self))
}

// cpuLimit is ReadCPULimit for cgroups mounted at root and a process whose
// /proc/self/cgroup reads self.
func cpuLimit(root, self string) float64 {
	least := 0.0
	take := func(l float64) {
		if l > 0 && (least == 0 || l < least) {
			least = l
		}
	}
	for line := range strings.SplitSeq(strings.TrimSpace(self), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err == nil {
				walkUp(root, parts[2], func(dir string) { take(readCPUMax(dir)) })
			}
		case slices.Contains(strings.Split(parts[1], ","), "cpu"):
			for _, mount := range []string{"cpu", "cpu,cpuacct", "cpuacct,cpu"} {
				walkUp(filepath.Join(root, mount), parts[2], func(dir string) { take(readCFSQuota(dir)) })
			}
		}
	}
	return least
}

// walkUp calls f with the directory of cgroup path under mount and of each
// of its ancestors, up to mount itself.
func walkUp(mount, path string, f func(dir string)) {
	for p := filepath.Clean("/" + path); ; p = filepath.Dir(p) {
		f(filepath.Join(mount, p))
		if p == "/" {
			return
		}
	}
}

// readCPUMax reads cgroup v2's cpu.max in dir: "quota period", or "max
// period" for none.
func readCPUMax(dir string) float64 {
	b, err := os.ReadFile(filepath.Join(dir, "cpu.max"))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) != 2 || f[0] == "max" {
		return 0
	}
	return ratio(f[0], f[1])
}

// readCFSQuota reads cgroup v1's quota and period in dir; v1 writes no
// limit as a quota of -1, which ratio reads as none.
func readCFSQuota(dir string) float64 {
	q, err1 := os.ReadFile(filepath.Join(dir, "cpu.cfs_quota_us"))
	p, err2 := os.ReadFile(filepath.Join(dir, "cpu.cfs_period_us"))
	if err1 != nil || err2 != nil {
		return 0
	}
	return ratio(strings.TrimSpace(string(q)), strings.TrimSpace(string(p)))
}

// ratio is quota / period, 0 unless both are whole numbers above 0.
func ratio(quota, period string) float64 {
	q, err1 := strconv.ParseInt(quota, 10, 64)
	p, err2 := strconv.ParseInt(period, 10, 64)
	if err1 != nil || err2 != nil || q <= 0 || p <= 0 {
		return 0
	}
	return float64(q) / float64(p)
}

// CPULimitCheck is how often a sidecar on one P by UnderCPULimit looks at
// its limit again: Go follows a limit changed in place (a pod resized)
// only while GOMAXPROCS was never set, and setting it to 1 stopped that.
const CPULimitCheck = 10 * time.Second

// FollowCPULimit hands the Ps back to Go's default, and Go's following of
// the limit, once read reports a limit above one CPU or none; until then,
// or ctx's end, it looks every interval.
func FollowCPULimit(ctx context.Context, read func() float64, every time.Duration, restore func(limit float64)) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if limit := read(); limit <= 0 || limit > onePLimit {
				restore(limit)
				return
			}
		}
	}
}
