package reference

import (
	"context"
	"sync"
	"time"
)

// Gradient2Config is Gradient2Limit's and its WindowedLimit's
// configuration, as their builders name it. Zero fields take the
// builders' defaults.
type Gradient2Config struct {
	// SetLimit applies a limit. Required.
	SetLimit func(int)
	// InFlight is the requests in flight now. Required.
	InFlight func() int64
	// InitialLimit, MinLimit and MaxConcurrency bound the limit. If zero,
	// 20, 20 and 200.
	InitialLimit, MinLimit, MaxConcurrency int
	// Smoothing is how much of each new estimate is taken. If zero, 0.2.
	Smoothing float64
	// QueueSize is the growth allowed each window while latency holds. If
	// zero, 4.
	QueueSize float64
	// LongWindow is the long-term RTT's exponential average, in windows.
	// If zero, 600.
	LongWindow int
	// RTTTolerance is how much the short RTT may exceed the long before
	// the limit shrinks. If zero, 1.5.
	RTTTolerance float64
	// Window is WindowedLimit's window time (its minimum and maximum
	// alike). If zero, 1 s.
	Window time.Duration
	// WindowSize is the fewest samples that make a window count. If zero,
	// 10.
	WindowSize int
	// MinRTT is the shortest sample taken. If zero, 100 µs.
	MinRTT time.Duration
}

// Gradient2 is Netflix concurrency-limits' Gradient2Limit wrapped in its
// WindowedLimit with the average sample window, from
// https://github.com/Netflix/concurrency-limits/blob/main/concurrency-limits-core/src/main/java/com/netflix/concurrency/limits/limit/Gradient2Limit.java
// and WindowedLimit.java beside it. Each window of Window holding at least
// WindowSize samples gives its average RTT (short) and the most requests
// in flight; then
//
//	long     = exponential average of short over LongWindow windows (after 10),
//	           cut by 5% whenever it is more than twice short
//	if inflight < limit/2: no change (the application limits the load)
//	gradient = clamp(RTTTolerance × long / short, 0.5, 1)
//	limit    = clamp(limit×(1−Smoothing) + (limit×gradient + QueueSize)×Smoothing, MinLimit, MaxConcurrency)
//
// The in-flight count of a sample is read as it is recorded, at the
// request's end, where Netflix's limiter counts it at its start; the
// window keeps the most.
type Gradient2 struct {
	cfg Gradient2Config

	mu        sync.Mutex
	estimated float64
	long      expAvg
	// The window being filled.
	sum        time.Duration
	count      int
	maxIn      int64
	nextUpdate time.Time
	apply      []int
}

// NewGradient2 returns the controller at InitialLimit.
func NewGradient2(cfg Gradient2Config) *Gradient2 {
	if cfg.InitialLimit == 0 {
		cfg.InitialLimit = 20
	}
	if cfg.MinLimit == 0 {
		cfg.MinLimit = 20
	}
	if cfg.MaxConcurrency == 0 {
		cfg.MaxConcurrency = 200
	}
	if cfg.Smoothing == 0 {
		cfg.Smoothing = 0.2
	}
	if cfg.QueueSize == 0 {
		cfg.QueueSize = 4
	}
	if cfg.LongWindow == 0 {
		cfg.LongWindow = 600
	}
	if cfg.RTTTolerance == 0 {
		cfg.RTTTolerance = 1.5
	}
	if cfg.Window == 0 {
		cfg.Window = time.Second
	}
	if cfg.WindowSize == 0 {
		cfg.WindowSize = 10
	}
	if cfg.MinRTT == 0 {
		cfg.MinRTT = 100 * time.Microsecond
	}
	return &Gradient2{cfg: cfg, estimated: float64(cfg.InitialLimit), long: expAvg{window: cfg.LongWindow, warmup: 10}}
}

// Limit is the limit in force.
func (g *Gradient2) Limit() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return int(g.estimated)
}

// Run applies the initial limit and waits for ctx: Gradient2 moves on its
// samples, in Record.
func (g *Gradient2) Run(ctx context.Context) {
	g.cfg.SetLimit(g.Limit())
	<-ctx.Done()
}

// Record takes one request's latency, from its admission to its answer.
func (g *Gradient2) Record(rtt time.Duration) {
	if rtt < g.cfg.MinRTT {
		return
	}
	inFlight := g.cfg.InFlight()
	end := time.Now()
	g.mu.Lock()
	g.sum += rtt
	g.count++
	g.maxIn = max(g.maxIn, inFlight)
	if end.After(g.nextUpdate) {
		// WindowedLimit: the next window ends Window after this sample.
		g.nextUpdate = end.Add(g.cfg.Window)
		if g.count >= g.cfg.WindowSize {
			g.update(g.sum/time.Duration(g.count), g.maxIn)
		}
		g.sum, g.count, g.maxIn = 0, 0, 0
	}
	apply := g.apply
	g.apply = nil
	g.mu.Unlock()
	for _, l := range apply {
		g.cfg.SetLimit(l)
	}
}

// update is Gradient2Limit._update. The caller holds g.mu.
func (g *Gradient2) update(rtt time.Duration, inFlight int64) {
	short := float64(rtt)
	long := g.long.add(short)
	if long/short > 2 {
		g.long.value *= 0.95
	}
	if float64(inFlight) < g.estimated/2 {
		return
	}
	gradient := max(0.5, min(1.0, g.cfg.RTTTolerance*long/short))
	next := g.estimated*gradient + g.cfg.QueueSize
	next = g.estimated*(1-g.cfg.Smoothing) + next*g.cfg.Smoothing
	next = max(float64(g.cfg.MinLimit), min(float64(g.cfg.MaxConcurrency), next))
	if int(next) != int(g.estimated) {
		g.apply = append(g.apply, int(next))
	}
	g.estimated = next
}

// expAvg is concurrency-limits' ExpAvgMeasurement: a plain mean over the
// first warmup samples, then an exponential average of factor
// 2 / (window + 1).
type expAvg struct {
	window, warmup, count int
	sum, value            float64
}

func (m *expAvg) add(v float64) float64 {
	if m.count < m.warmup {
		m.count++
		m.sum += v
		m.value = m.sum / float64(m.count)
		return m.value
	}
	f := 2 / float64(m.window+1)
	m.value = m.value*(1-f) + v*f
	return m.value
}
