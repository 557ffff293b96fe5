package stub

import (
	"container/list"
	"context"
	"sync"
)

// workers is the hidden pool: FIFO permits, as x/sync's semaphore gives,
// whose number can change while requests hold and wait for them. A real
// service's capacity moves (a node joins the database cluster, a
// dependency scales in), and an adaptive limit must follow it; a pool
// resized mid-run is that change with a known truth.
type workers struct {
	mu      sync.Mutex
	size    int64
	held    int64
	waiters list.List // of chan struct{}, closed when granted
}

func newWorkers(size int) *workers { return &workers{size: int64(size)} }

// Acquire waits FIFO for one worker (n is always 1) or for ctx to end.
func (w *workers) Acquire(ctx context.Context, n int64) error {
	w.mu.Lock()
	if w.held < w.size && w.waiters.Len() == 0 {
		w.held++
		w.mu.Unlock()
		return nil
	}
	ready := make(chan struct{})
	elem := w.waiters.PushBack(ready)
	w.mu.Unlock()
	select {
	case <-ready:
		return nil
	case <-ctx.Done():
		w.mu.Lock()
		select {
		case <-ready:
			// Granted while ctx ended: the worker is ours to hand on.
			w.held--
			w.grant()
		default:
			w.waiters.Remove(elem)
		}
		w.mu.Unlock()
		return ctx.Err()
	}
}

// Release returns one worker.
func (w *workers) Release(n int64) {
	w.mu.Lock()
	w.held--
	w.grant()
	w.mu.Unlock()
}

// Resize sets the number of workers. Shrinking takes effect as workers
// are released: requests being served are not interrupted, and no new one
// starts until fewer than size are held.
func (w *workers) Resize(size int) {
	w.mu.Lock()
	w.size = int64(size)
	w.grant()
	w.mu.Unlock()
}

// Size is the number of workers now.
func (w *workers) Size() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.size
}

// grant hands free workers to the longest waiters. The caller holds w.mu.
func (w *workers) grant() {
	for w.held < w.size && w.waiters.Len() > 0 {
		ready := w.waiters.Remove(w.waiters.Front()).(chan struct{})
		w.held++
		close(ready)
	}
}
