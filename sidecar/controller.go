package sidecar

import (
	"context"
	"time"

	"github.com/loomgate/loomgate/adaptive"
)

// Controller moves the adaptive mode's limit. Package adaptive's is the
// one the sidecar builds; Options.Controller plugs another in its place, so
// that the lab can run other algorithms behind the same proxy, limiter and
// queue, and compare the controllers alone. Either is built from the same
// hooks, hears of the same requests and runs the same way.
type Controller interface {
	// Record is told of each request the upstream answered (below 500):
	// its route class (an index of the route classes, for a controller
	// that weighs routes by their cost; one that does not ignores it) and
	// its service time, admission to last byte, without loomgate's queue.
	Record(class int, service time.Duration)
	// Run moves the limit until ctx ends.
	Run(ctx context.Context)
}

// ControllerHooks are what a Controller reads and moves.
type ControllerHooks struct {
	// SetLimit applies a limit; 0 opens admission.
	SetLimit func(int)
	// State is admission's state now.
	State func() adaptive.State
}

// newController builds the controller that moves p's limit: plugged's, or
// package adaptive's, which s.adaptive then is; nil where the limit is the
// configuration's.
func (s *Sidecar) newController(p *policy, plugged func(ControllerHooks) Controller) (Controller, error) {
	if p.limit == nil {
		return nil, nil
	}
	hooks := ControllerHooks{SetLimit: p.decides.SetLimit, State: p.controllerState}
	if plugged != nil {
		return plugged(hooks), nil
	}
	c, err := adaptive.New(adaptive.Config{
		SetLimit: hooks.SetLimit,
		State:    hooks.State,
		Estimate: func() adaptive.Estimate {
			e := s.advisor.Snapshot().Figures.Estimate
			return adaptive.Estimate{Saturated: e.Saturated, Capacity: e.Capacity, LowerBound: e.LowerBound}
		},
		Min: s.cfg.AdaptiveMin, Max: s.cfg.AdaptiveMax,
		Logger:   s.log,
		OnChange: func(ch adaptive.Change) { s.metrics.LimitChanged(string(ch.Reason)) },
		Paused:   func() bool { return s.probe != nil && s.probe.Active() },
	})
	if err != nil {
		return nil, err
	}
	s.adaptive = c
	return c, nil
}
