package h2c

import "testing"

// TestCopyBuffersDoNotAllocate: a stream takes a copy buffer from the pool
// and gives it back without allocating; pooling a slice's address would
// allocate its header every time.
func TestCopyBuffersDoNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop what is put in it")
	}
	var b copyBuffers
	b.Put(b.Get())
	if n := testing.AllocsPerRun(100, func() { b.Put(b.Get()) }); n != 0 {
		t.Errorf("a copy buffer's round trip through the pool allocates %v times; want 0", n)
	}
}
