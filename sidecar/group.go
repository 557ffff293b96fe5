package sidecar

import (
	"context"
	"sync"
)

// group runs functions side by side and keeps the first error; the first
// to fail cancels the group's context, as ctx's end does. It is what
// x/sync's errgroup.WithContext does, for the one place that needs it.
type group struct {
	wg     sync.WaitGroup
	cancel context.CancelCauseFunc
	once   sync.Once
	err    error
}

func newGroup(ctx context.Context) (*group, context.Context) {
	ctx, cancel := context.WithCancelCause(ctx)
	return &group{cancel: cancel}, ctx
}

// Go runs f in a goroutine of its own.
func (g *group) Go(f func() error) {
	g.wg.Go(func() {
		if err := f(); err != nil {
			g.once.Do(func() {
				g.err = err
				g.cancel(err)
			})
		}
	})
}

// Wait returns once every function has, with the first error.
func (g *group) Wait() error {
	g.wg.Wait()
	g.cancel(nil)
	return g.err
}
