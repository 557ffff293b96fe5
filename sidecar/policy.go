package sidecar

import (
	"context"
	"time"

	"github.com/loomgate/loomgate/adaptive"
	"github.com/loomgate/loomgate/limiter"
)

// policy is the admission policy the configuration chose, with what the
// sidecar's other parts read and move of it. newPolicy builds it, the one
// place that reads the mode and the dry run: the rest reads these fields,
// whatever was chosen.
type policy struct {
	// admits is what the proxy enforces, on every request.
	admits limiter.Policy
	// held holds what is admitted for real: its state, peaks and
	// request-seconds are the traffic's. In a dry run, the pass-through
	// that admits everyone.
	held *limiter.Limiter
	// decides is the mode's own limiter, enforced or, in a dry run,
	// shadowed: its limit is the one in force, or the one the mode would
	// enforce (loomgate_limit), and in adaptive mode a controller moves
	// it.
	decides *limiter.Limiter
	// limit is the limit of the moment, for a mode whose limit moves
	// (adaptive), which the advice then takes as the workers in force;
	// nil where the limit is the configuration's.
	limit func() int
	// maxWait is the longest a request may wait for admission:
	// LOOMGATE_QUEUE_TIMEOUT, or LOOMGATE_BULKHEAD_WAIT in unbounded mode.
	maxWait time.Duration
	// beside runs beside the traffic until ctx ends: a dry run tells its
	// shadow the upstream's capacity. Nil when there is nothing to run.
	beside func(ctx context.Context)
	// close ends what the policy runs of its own, once the traffic has.
	close func()
}

// newPolicy builds the policy cfg configures: the limiter of its mode
// (FIFO or CoDel queueing), in a dry run if cfg asks for one, which tells
// report of each decision.
func (s *Sidecar) newPolicy(cfg Config) (*policy, error) {
	lim, err := limiter.New(cfg.Limiter())
	if err != nil {
		return nil, err
	}
	p := &policy{admits: lim, held: lim, decides: lim, maxWait: cfg.QueueTimeout, close: func() {}}
	if cfg.Mode == limiter.Unbounded {
		p.maxWait = cfg.BulkheadWait
	}
	if cfg.Mode == limiter.Adaptive {
		p.limit = func() int { return lim.Stats().Limit }
	}
	if cfg.DryRun {
		// The configured mode decides in the shadow; what admits for real
		// holds nothing back, and only counts in flight and bytes.
		dry := limiter.NewDryRun(lim, s.dryRunDecision)
		p.admits, p.held, p.close = dry, dry.Held(), dry.Close
		p.beside = func(ctx context.Context) { s.tellShadow(ctx, dry.Shadow()) }
	}
	return p, nil
}

// controllerState is what a controller samples of admission: the
// requests the upstream really holds, and those waiting for the mode's
// limit. In a dry run the two are the real traffic's and the shadow's:
// a controller judges a limit by the throughput the upstream gives,
// in-flight over service time, and the shadow's in-flight is capped by
// its limit while the service times are those of the load the upstream
// really gets. Read off the shadow, each step up seemed to raise
// throughput in proportion, and the limit ran away.
func (p *policy) controllerState() adaptive.State {
	return adaptive.State{InFlight: p.held.Stats().InFlight, Queued: p.decides.Stats().Queued}
}
