package sidecar

import (
	"testing"

	"github.com/loomgate/loomgate/limiter"
)

func TestConnsBound(t *testing.T) {
	tests := []struct {
		files             int
		mode              limiter.Mode
		workers, bulkhead int
		want              int
		ok                bool
	}{
		// The README's example: 20000 descriptors, fixed 200.
		{20000, limiter.Fixed, 200, 0, 19736, true},
		// Unbounded with a bulkhead: the pool is the bulkhead.
		{20000, limiter.Unbounded, 200, 500, 19436, true},
		// Pass-through: each client may need an upstream connection.
		{20000, limiter.Unbounded, 200, 0, 9968, true},
		// Too few descriptors for 200 workers: half and half, and said.
		{256, limiter.Fixed, 200, 0, 96, false},
		{256, limiter.Fixed, 20, 0, 172, true},
		// No limit known: no bound.
		{0, limiter.Fixed, 200, 0, 0, true},
	}
	for _, tt := range tests {
		got, ok := connsBound(tt.files, tt.mode, tt.workers, tt.bulkhead)
		if got != tt.want || ok != tt.ok {
			t.Errorf("connsBound(%d, %v, %d, %d) = %d, %v; want %d, %v", tt.files, tt.mode, tt.workers, tt.bulkhead, got, ok, tt.want, tt.ok)
		}
	}
}
