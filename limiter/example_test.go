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
