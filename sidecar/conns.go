package sidecar

import (
	"errors"
	"math"
	"strconv"
	"strings"

	"github.com/loomgate/loomgate/limiter"
	"github.com/loomgate/loomgate/proxy"
)

// AutoCount is LOOMGATE_MAX_CONNS: a number, or auto (its default), which
// New derives from the open-file limit and the memory limit.
type AutoCount int

// CountAuto is the value of an AutoCount written as auto.
const CountAuto AutoCount = math.MinInt

// UnmarshalText reads auto or a whole number.
func (a *AutoCount) UnmarshalText(text []byte) error {
	s := strings.TrimSpace(string(text))
	if strings.EqualFold(s, "auto") {
		*a = CountAuto
		return nil
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return errors.New("not a whole number or auto")
	}
	*a = AutoCount(n)
	return nil
}

// MarshalText writes the value as UnmarshalText reads it.
func (a AutoCount) MarshalText() ([]byte, error) { return []byte(a.String()), nil }

// String writes auto or the number.
func (a AutoCount) String() string {
	if a == CountAuto {
		return "auto"
	}
	return strconv.Itoa(int(a))
}

// Descriptors the sidecar keeps for itself, outside client and upstream
// connections: its listeners, the admin port's clients (scrapes, probes,
// kubectl port-forward), the upstream metrics scrape, stdout and stderr.
const reservedFiles = 64

// connsBound is what LOOMGATE_MAX_CONNS=auto means under an open-file
// limit of files: every descriptor that the upstream pool and the sidecar
// itself do not need. A proxied request holds two descriptors, its
// client's and an upstream connection; the pool has at most pool
// connections, the admission limit, and without one (pool 0) each client
// may need its own. Zero when files is 0 (no limit known). ok is false when
// the limit leaves fewer client connections than the pool, so that the
// admission limit could never be reached.
func connsBound(files, pool int) (bound int, ok bool) {
	if files <= 0 {
		return 0, true
	}
	if pool == 0 {
		return max((files-reservedFiles)/2, 1), true
	}
	bound = files - reservedFiles - pool
	if bound < pool {
		// Too few descriptors for the limit: share them half and half
		// rather than starve either side.
		return max((files-reservedFiles)/2, 1), false
	}
	return bound, true
}

// ConnShare is the part of what the memory bulkhead leaves of the memory
// limit (the limit less MAX_INFLIGHT_BYTES) that LOOMGATE_MAX_CONNS=auto
// gives client connections, at proxy.ClientConnBytes each: half. The other
// half is the process's own (about 20 MiB: code, metrics, the advice
// window), the collector's headroom, and the kernel's socket buffers, which
// a container's limit counts too.
const ConnShare = 0.5

// connsMemoryBound is what LOOMGATE_MAX_CONNS=auto means under a memory
// limit of limit bytes, of which the memory bulkhead may take inflight:
// ConnShare of what it leaves, at proxy.ClientConnBytes a connection.
// Where the bulkhead leaves less than a quarter of the limit (set by hand
// near it, or above it), a quarter is taken as left: a bound that admits
// next to nobody would protect nothing. 0 (no bound) without a limit.
//
// Each connection costs that much outside the bulkhead whatever it does:
// open and silent, kept alive, waiting in the queue, HTTP/2 with no
// stream; what a request holds once admitted, or an HTTP/2 stream, is
// reserved in the bulkhead. The open-file limit gave a 256 MiB pod 19,736
// connections, which a burst of 20,000 took, at 12 KiB each by RSS, past
// the limit: the kernel killed the process.
func connsMemoryBound(limit, inflight int64) int {
	if limit <= 0 {
		return 0
	}
	left := max(limit-inflight, limit/4)
	return max(int(float64(left)*ConnShare/proxy.ClientConnBytes), 1)
}

// upstreamPool is the most upstream connections cfg's admission can use
// at once, 0 when unbounded (as in a dry run, which holds nothing back).
func upstreamPool(cfg Config) int {
	if cfg.DryRun {
		return 0
	}
	switch cfg.Mode {
	case limiter.Fixed:
		return cfg.Workers
	case limiter.Unbounded:
		return cfg.Bulkhead
	case limiter.Adaptive:
		return cfg.AdaptiveMax
	}
	return 0
}
