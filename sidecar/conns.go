package sidecar

import (
	"errors"
	"math"
	"strconv"
	"strings"

	"github.com/loomgate/loomgate/limiter"
)

// AutoCount is LOOMGATE_MAX_CONNS: a number, or auto (its default), which
// New derives from the open-file limit.
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
