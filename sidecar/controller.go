package sidecar

import (
	"context"
	"time"

	"github.com/loomgate/loomgate/adaptive"
	"github.com/loomgate/loomgate/limiter"
	"github.com/loomgate/loomgate/proxy"
)

// Controller moves the adaptive mode's limit in place of package
// adaptive's controller. Options.Controller plugs one in, so that the lab
// can run other algorithms behind the same proxy, limiter and queue, and
// compare the controllers alone.
type Controller interface {
	// Record is told of each request the upstream answered (below 500),
	// with its service time: admission to last byte, without loomgate's
	// queue.
	Record(service time.Duration)
	// Run moves the limit until ctx ends.
	Run(ctx context.Context)
}

// ControllerHooks are what a plugged Controller reads and moves.
type ControllerHooks struct {
	// SetLimit applies a limit; 0 opens admission.
	SetLimit func(int)
	// State is admission's state now.
	State func() adaptive.State
}

// plug builds opts.Controller over policy, the limiter whose limit it
// moves, sampling state (see Sidecar.controlled).
func plug(newController func(ControllerHooks) Controller, policy *limiter.Limiter, state func() adaptive.State) Controller {
	return newController(ControllerHooks{SetLimit: policy.SetLimit, State: state})
}

// pluggedObserver hands a plugged Controller the samples package adaptive's
// controller gets from observer.Observe.
type pluggedObserver struct {
	proxy.Observer
	controller Controller
}

func (o pluggedObserver) Observe(out *proxy.Outcome) {
	o.Observer.Observe(out)
	if out.Admitted && out.Answered() {
		o.controller.Record(out.Service)
	}
}
