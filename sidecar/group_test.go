package sidecar

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestGroupFirstFailureEndsTheRest: the first function to fail cancels
// the group's context, with its error as the cause, so that the parts
// waiting on it end; Wait returns that error once all have returned, not
// a later one.
func TestGroupFirstFailureEndsTheRest(t *testing.T) {
	g, ctx := newGroup(context.Background())
	first, later := errors.New("traffic listener: broken"), errors.New("later")
	ended := make(chan struct{})
	g.Go(func() error {
		<-ctx.Done()
		close(ended)
		return later
	})
	g.Go(func() error { return first })
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting part never saw the group's context end")
	}
	if err := g.Wait(); err != first {
		t.Errorf("Wait = %v; want the first error, %v", err, first)
	}
	if cause := context.Cause(ctx); cause != first {
		t.Errorf("the context's cause = %v; want %v", cause, first)
	}
}

// TestGroupWithoutFailure: when every part succeeds, Wait returns nil,
// and the group's context ends with it.
func TestGroupWithoutFailure(t *testing.T) {
	g, ctx := newGroup(context.Background())
	for range 3 {
		g.Go(func() error { return nil })
	}
	if err := g.Wait(); err != nil {
		t.Errorf("Wait = %v; want nil", err)
	}
	if ctx.Err() == nil {
		t.Error("the group's context is alive after Wait; want it ended")
	}
}
