package sidecar

import (
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
