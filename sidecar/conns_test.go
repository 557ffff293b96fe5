package sidecar

import (
	"log/slog"
	"strconv"
	"strings"
	"testing"

	"github.com/loomgate/loomgate/limiter"
)

func TestConnsBound(t *testing.T) {
	tests := []struct {
		files int
		cfg   Config
		want  int
		ok    bool
	}{
		// The README's example: 20000 descriptors, fixed 200.
		{20000, Config{Mode: limiter.Fixed, Workers: 200}, 19736, true},
		// Unbounded with a bulkhead: the pool is the bulkhead.
		{20000, Config{Mode: limiter.Unbounded, Workers: 200, Bulkhead: 500}, 19436, true},
		// Pass-through: each client may need an upstream connection.
		{20000, Config{Mode: limiter.Unbounded, Workers: 200}, 9968, true},
		// Adaptive: bounded by ADAPTIVE_MAX when set, else as pass-through.
		{20000, Config{Mode: limiter.Adaptive, AdaptiveMax: 1000}, 18936, true},
		{20000, Config{Mode: limiter.Adaptive}, 9968, true},
		// A dry run admits everyone: as pass-through.
		{20000, Config{Mode: limiter.Fixed, Workers: 200, DryRun: true}, 9968, true},
		// Too few descriptors for 200 workers: half and half, and said.
		{256, Config{Mode: limiter.Fixed, Workers: 200}, 96, false},
		{256, Config{Mode: limiter.Fixed, Workers: 20}, 172, true},
		// No limit known: no bound.
		{0, Config{Mode: limiter.Fixed, Workers: 200}, 0, true},
	}
	for _, tt := range tests {
		got, ok := connsBound(tt.files, upstreamPool(tt.cfg))
		if got != tt.want || ok != tt.ok {
			t.Errorf("connsBound(%d, upstreamPool(%+v)) = %d, %v; want %d, %v", tt.files, tt.cfg, got, ok, tt.want, tt.ok)
		}
	}
}

func TestConnsMemoryBound(t *testing.T) {
	const mib = 1 << 20
	tests := []struct {
		limit, inflight int64
		want            int
	}{
		// The Kubernetes example: a 256 MiB pod, the bulkhead auto (half):
		// 64 MiB for connections at 32 KiB.
		{256 * mib, 128 * mib, 2048},
		// GOMEMLIMIT=230MiB, the bulkhead auto.
		{230 * mib, 115 * mib, 1840},
		// No bulkhead: half of the limit.
		{256 * mib, 0, 4096},
		// A bulkhead near the limit, or above it: a quarter of it is
		// taken as left.
		{256 * mib, 250 * mib, 1024},
		{256 * mib, 1024 * mib, 1024},
		// A tiny limit still lets one in.
		{16 << 10, 0, 1},
		// No limit: no bound.
		{0, 0, 0},
	}
	for _, tt := range tests {
		if got := connsMemoryBound(tt.limit, tt.inflight); got != tt.want {
			t.Errorf("connsMemoryBound(%d MiB, %d MiB) = %d; want %d", tt.limit/mib, tt.inflight/mib, got, tt.want)
		}
	}
}

// TestMaxConnsAutoFromMemory: under a memory limit, MAX_CONNS=auto is the
// lower of what the open-file limit and the memory limit allow, and the
// log says which, and how to choose; a number set is kept as it is.
func TestMaxConnsAutoFromMemory(t *testing.T) {
	if files := openFileLimit(); files > 0 && files < 16384 {
		t.Skipf("the open-file limit (%d) would bind before the memory limit", files)
	}
	root := cgroupRoot(t, "memory.max", strconv.Itoa(256<<20)+"\n")
	for _, tt := range []struct {
		env  []string
		want AutoCount
		log  string
	}{
		{nil, 2048, `msg="client connections bounded by the memory limit: beyond, new ones wait in the listen backlog; set LOOMGATE_MAX_CONNS to choose" LOOMGATE_MAX_CONNS=2048 limit=256MiB`},
		{[]string{"LOOMGATE_MAX_INFLIGHT_BYTES=0"}, 4096, "LOOMGATE_MAX_CONNS=4096"},
		{[]string{"LOOMGATE_MAX_CONNS=5000"}, 5000, ""},
		// An admission limit above the bound: said.
		{[]string{"LOOMGATE_MODE=fixed", "LOOMGATE_WORKERS=3000"}, 2048, `level=WARN msg="the memory limit leaves room for fewer client connections than the admission limit`},
	} {
		var log strings.Builder
		s, err := New(testConfig(t, append([]string{"LOOMGATE_UPSTREAM=http://127.0.0.1:1"}, tt.env...)...),
			Options{Logger: slog.New(slog.NewTextHandler(&log, nil)), CgroupRoot: root, Getenv: noEnv})
		if err != nil {
			t.Fatal(err)
		}
		if got := s.Config().MaxConns; got != tt.want {
			t.Errorf("%v: MAX_CONNS = %v; want %v", tt.env, got, tt.want)
		}
		if !strings.Contains(log.String(), tt.log) {
			t.Errorf("%v: log:\n%s\nwant a line with %s", tt.env, log.String(), tt.log)
		}
	}
}
