package limiter_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/loomgate/loomgate/limiter"
)

func Example() {
	// Tomcat's classic pool, shrunk: 2 workers, 1 waiter, 1 s wait.
	l, err := limiter.New(limiter.Config{Mode: limiter.Fixed, Workers: 2, QueueSize: 1, QueueTimeout: time.Second})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	l.Acquire(ctx, 0)
	l.Acquire(ctx, 0)
	go l.Acquire(ctx, 0) // waits in the queue
	for l.Stats().Queued == 0 {
		time.Sleep(time.Millisecond)
	}
	err = l.Acquire(ctx, 0)
	fmt.Println(errors.Is(err, limiter.ErrQueueFull))
	s := l.Stats()
	fmt.Println(s.InFlight, s.Queued, s.Limit, s.QueueLimit)
	// Output:
	// true
	// 2 1 2 1
}

func ExampleLimiter_TryReserve() {
	// A 64 KiB memory bulkhead. A request is admitted with its 16 KiB
	// declared body; when its response's headers announce 60 KiB, there is
	// no room to buffer them, so the caller streams the body instead.
	l, err := limiter.New(limiter.Config{Mode: limiter.Unbounded, MaxInFlightBytes: 64 << 10})
	if err != nil {
		panic(err)
	}
	held := int64(16 << 10)
	if err := l.Acquire(context.Background(), held); err != nil {
		panic(err)
	}
	if l.TryReserve(60 << 10) {
		held += 60 << 10
		fmt.Println("buffer the response")
	} else {
		fmt.Println("stream the response")
	}
	fmt.Println(l.Stats().Bytes >> 10)
	l.Release(held)
	fmt.Println(l.Stats().Bytes)
	// Output:
	// stream the response
	// 16
	// 0
}
