//go:build race

package h2c

import "sync"

// held panics unless mu is locked: a function whose comment says a lock
// is held says so here too, and the tests, which run with the race
// detector, hold it to it. A lock another goroutine holds passes too;
// what it catches is a call with none held, where a caller forgot it.
func held(mu *sync.Mutex) {
	if mu.TryLock() {
		mu.Unlock()
		panic("h2c: called without the lock its comment says is held")
	}
}
