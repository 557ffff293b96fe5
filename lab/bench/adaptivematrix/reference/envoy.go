package reference

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"time"
)

// EnvoyConfig is the gradient controller's configuration, as Envoy's
// envoy.extensions.filters.http.adaptive_concurrency.v3.GradientControllerConfig
// names it. Zero fields take Envoy's defaults; the two fields Envoy requires
// take the values of its documentation's example.
type EnvoyConfig struct {
	// SetLimit applies a limit. Required.
	SetLimit func(int)
	// UpdateInterval is concurrency_limit_params.concurrency_update_interval:
	// how often the limit is recalculated. Required by Envoy; if zero,
	// 100 ms, its documentation's example.
	UpdateInterval time.Duration
	// MaxConcurrency is concurrency_limit_params.max_concurrency_limit. If
	// zero, 1000.
	MaxConcurrency int
	// MinRTTInterval is min_rtt_calc_params.interval: how often the
	// minimum RTT is measured again. Required by Envoy; if zero, 60 s, its
	// documentation's example.
	MinRTTInterval time.Duration
	// Jitter is min_rtt_calc_params.jitter, a fraction of MinRTTInterval
	// added at random. If zero, 0.15.
	Jitter float64
	// RequestCount is min_rtt_calc_params.request_count: the samples a
	// minimum RTT is taken from. If zero, 50.
	RequestCount int
	// MinConcurrency is min_rtt_calc_params.min_concurrency: the limit
	// while the minimum RTT is measured, and the lowest. If zero, 3.
	MinConcurrency int
	// Buffer is min_rtt_calc_params.buffer, the share over the minimum RTT
	// that counts as no queueing. If zero, 0.25.
	Buffer float64
	// Percentile is sample_aggregate_percentile. If zero, 0.5.
	Percentile float64
}

// Envoy is Envoy's gradient controller, from
// https://github.com/envoyproxy/envoy/blob/main/source/extensions/filters/http/adaptive_concurrency/controller/gradient_controller.cc
// and the filter's documentation: every MinRTTInterval (with jitter), the
// limit drops to MinConcurrency until RequestCount requests started since
// have finished, whose Percentile is the new minimum RTT; every
// UpdateInterval otherwise, the Percentile of the interval's samples is
// the sample RTT, and
//
//	gradient = clamp((1 + Buffer) × minRTT / sampleRTT, 0.5, 2)
//	limit    = clamp(limit × gradient + √(limit × gradient), MinConcurrency, MaxConcurrency)
//
// The limit held at MinConcurrency for 5 intervals in a row starts a new
// measure of the minimum RTT at once. Envoy's timers are approximated on a
// grid of UpdateInterval (a minimum-RTT window starts up to one interval
// late); its histogram's approximate percentile is an exact one here.
type Envoy struct {
	cfg EnvoyConfig

	mu         sync.Mutex
	limit      int
	deferred   int // the limit to restore after a minimum-RTT window
	inMinRTT   bool
	epoch      time.Time // requests started before it are not sampled
	minRTT     time.Duration
	samples    []time.Duration
	nextMinRTT time.Time
	atMin      int // consecutive recalculations left at MinConcurrency
	apply      []int
}

// NewEnvoy returns the controller, at MinConcurrency and measuring the
// minimum RTT, as Envoy's starts.
func NewEnvoy(cfg EnvoyConfig) *Envoy {
	if cfg.UpdateInterval == 0 {
		cfg.UpdateInterval = 100 * time.Millisecond
	}
	if cfg.MaxConcurrency == 0 {
		cfg.MaxConcurrency = 1000
	}
	if cfg.MinRTTInterval == 0 {
		cfg.MinRTTInterval = time.Minute
	}
	if cfg.Jitter == 0 {
		cfg.Jitter = 0.15
	}
	if cfg.RequestCount == 0 {
		cfg.RequestCount = 50
	}
	if cfg.MinConcurrency == 0 {
		cfg.MinConcurrency = 3
	}
	if cfg.Buffer == 0 {
		cfg.Buffer = 0.25
	}
	if cfg.Percentile == 0 {
		cfg.Percentile = 0.5
	}
	e := &Envoy{cfg: cfg, limit: cfg.MinConcurrency}
	e.enterMinRTT(time.Now())
	return e
}

// Limit is the limit in force.
func (e *Envoy) Limit() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.limit
}

// Record takes one request's latency, from its admission to its answer.
func (e *Envoy) Record(latency time.Duration) {
	now := time.Now()
	e.mu.Lock()
	if now.Add(-latency).Before(e.epoch) {
		// Started in the previous window: not the minimum RTT's sample.
		e.mu.Unlock()
		return
	}
	e.samples = append(e.samples, latency)
	if e.inMinRTT && len(e.samples) >= e.cfg.RequestCount {
		e.minRTT = e.percentile()
		// Restored while still in the window, as Envoy's updateMinRTT
		// does: the restore does not count as a recalculation at the
		// minimum.
		e.set(e.deferred)
		e.inMinRTT = false
		jitter := time.Duration(rand.Float64() * e.cfg.Jitter * float64(e.cfg.MinRTTInterval))
		e.nextMinRTT = now.Add(e.cfg.MinRTTInterval + jitter)
	}
	e.flush()
}

// Run recalculates the limit every UpdateInterval, and starts each
// minimum-RTT window when due, until ctx ends.
func (e *Envoy) Run(ctx context.Context) {
	e.mu.Lock()
	e.flush()
	t := time.NewTicker(e.cfg.UpdateInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			e.mu.Lock()
			switch {
			case e.inMinRTT:
			case !now.Before(e.nextMinRTT):
				e.enterMinRTT(now)
			case len(e.samples) > 0:
				sample := e.percentile()
				buffered := float64(e.minRTT) * (1 + e.cfg.Buffer)
				gradient := max(0.5, min(2.0, buffered/float64(sample)))
				limit := float64(e.limit) * gradient
				// Envoy converts to uint32, truncating.
				next := int(limit + math.Sqrt(limit))
				e.set(max(e.cfg.MinConcurrency, min(e.cfg.MaxConcurrency, next)))
				if e.atMin >= 5 {
					e.nextMinRTT = now
				}
			}
			e.flush()
		}
	}
}

// enterMinRTT starts a minimum-RTT window. The caller holds e.mu.
func (e *Envoy) enterMinRTT(now time.Time) {
	e.deferred = e.limit
	e.inMinRTT = true
	e.set(e.cfg.MinConcurrency)
	e.samples = e.samples[:0]
	e.epoch = now
}

// set chooses a limit, counting recalculations at the minimum, as Envoy's
// updateConcurrencyLimit does. The caller holds e.mu.
func (e *Envoy) set(limit int) {
	if !e.inMinRTT && e.limit == e.cfg.MinConcurrency && limit == e.cfg.MinConcurrency {
		e.atMin++
	} else {
		e.atMin = 0
	}
	e.limit = limit
	e.apply = append(e.apply, limit)
}

// percentile takes the samples' Percentile and clears them. The caller
// holds e.mu.
func (e *Envoy) percentile() time.Duration {
	slices.Sort(e.samples)
	i := int(math.Ceil(e.cfg.Percentile*float64(len(e.samples)))) - 1
	d := e.samples[max(i, 0)]
	e.samples = e.samples[:0]
	return d
}

// flush applies the limits chosen, in order, and releases e.mu: the
// limiter is called with no lock held.
func (e *Envoy) flush() {
	apply := e.apply
	e.apply = nil
	e.mu.Unlock()
	for _, l := range apply {
		e.cfg.SetLimit(l)
	}
}
