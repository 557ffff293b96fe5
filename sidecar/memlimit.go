package sidecar

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
)

// The memory a sidecar may use is bounded by its container's limit, and a
// process past it is killed by the kernel: every request it held fails at
// once, and the pod restarts. So unless told otherwise the sidecar bounds
// what requests reserve (the memory bulkhead) by that limit, and rejects a
// request that would pass it with rejected_memory instead.
const (
	// InflightShare is the part of the memory limit that requests may
	// reserve when LOOMGATE_MAX_INFLIGHT_BYTES is auto: half. The other
	// half is the process's own (about 20 MiB: code, metrics, the advice
	// window), the collector's headroom, and what a reservation does not
	// count; a request reserves 96 KiB where a held one measures 20-25
	// KiB, so the bound is reached long before the memory is.
	InflightShare = 0.5

	// RuntimeLimitShare is the part of the cgroup's limit given to the Go
	// runtime as its memory limit when GOMEMLIMIT is not set: the collector
	// then works harder as the process nears the limit instead of letting
	// garbage grow into it. The rest is for what the runtime does not
	// count (code, kernel buffers charged to the cgroup).
	RuntimeLimitShare = 0.9

	// DefaultCgroupRoot is where the container's cgroup is mounted.
	DefaultCgroupRoot = "/sys/fs/cgroup"
)

// AutoSize is LOOMGATE_MAX_INFLIGHT_BYTES: a Size, or auto (its default),
// which New turns into a share of the memory limit.
type AutoSize int64

// SizeAuto is the value of an AutoSize written as auto: one no size can
// be, so that a negative size is still an error.
const SizeAuto AutoSize = math.MinInt64

// UnmarshalText reads auto or a Size.
func (a *AutoSize) UnmarshalText(text []byte) error {
	if strings.EqualFold(strings.TrimSpace(string(text)), "auto") {
		*a = SizeAuto
		return nil
	}
	var s Size
	if err := s.UnmarshalText(text); err != nil {
		return err
	}
	*a = AutoSize(s)
	return nil
}

// MarshalText writes the value as UnmarshalText reads it.
func (a AutoSize) MarshalText() ([]byte, error) { return []byte(a.String()), nil }

// String writes auto or the size.
func (a AutoSize) String() string {
	if a == SizeAuto {
		return "auto"
	}
	return Size(a).String()
}

// MemoryLimit is the memory the process may use, and where that was read.
type MemoryLimit struct {
	// Bytes is the limit, 0 when there is none.
	Bytes int64
	// Source says where it was read: GOMEMLIMIT or the cgroup file.
	Source string
}

// ReadMemoryLimit returns the process's memory limit: GOMEMLIMIT when it
// is set (the operator said so), else the cgroup's, from root
// (DefaultCgroupRoot if empty): cgroup v2's memory.max, or v1's
// memory/memory.limit_in_bytes. No limit (max, or v1's near-2^63
// "unlimited") is Bytes 0.
func ReadMemoryLimit(root string, getenv func(string) string) MemoryLimit {
	if getenv == nil {
		getenv = os.Getenv
	}
	if v := getenv("GOMEMLIMIT"); v != "" && v != "off" {
		// The runtime parsed it at start; what it holds is the truth.
		if n := debug.SetMemoryLimit(-1); n > 0 && n < math.MaxInt64 {
			return MemoryLimit{Bytes: n, Source: "GOMEMLIMIT"}
		}
	}
	if root == "" {
		root = DefaultCgroupRoot
	}
	for _, p := range []string{
		filepath.Join(root, "memory.max"),
		filepath.Join(root, "memory", "memory.limit_in_bytes"),
	} {
		n, err := readLimitFile(p)
		if err == nil {
			return MemoryLimit{Bytes: n, Source: p}
		}
	}
	return MemoryLimit{}
}

// unlimited is the least value read as no limit: cgroup v1 writes
// "unlimited" as the largest page multiple below 2^63.
const unlimited = 1 << 62

func readLimitFile(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	s := strings.TrimSpace(string(b))
	if s == "max" {
		return 0, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	switch {
	case err != nil:
		return 0, err
	case n <= 0:
		return 0, errors.New("not a limit")
	case n >= unlimited:
		return 0, nil
	}
	return n, nil
}

// SetRuntimeMemoryLimit gives the Go runtime RuntimeLimitShare of the
// cgroup's limit when GOMEMLIMIT is not set, and returns the limit set (0:
// none). It changes the whole process: the command calls it, not New.
func SetRuntimeMemoryLimit(limit MemoryLimit, getenv func(string) string) int64 {
	if getenv == nil {
		getenv = os.Getenv
	}
	if limit.Bytes == 0 || getenv("GOMEMLIMIT") != "" {
		return 0
	}
	n := int64(float64(limit.Bytes) * RuntimeLimitShare)
	debug.SetMemoryLimit(n)
	return n
}

// inflightBound is the memory bulkhead auto gives under limit: 0 (none)
// without a limit.
func inflightBound(limit MemoryLimit) int64 {
	return int64(float64(limit.Bytes) * InflightShare)
}
