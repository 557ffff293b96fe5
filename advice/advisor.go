package advice

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"

	"github.com/loomgate/loomgate/advice/memory"
	"github.com/loomgate/loomgate/field"
	"github.com/loomgate/loomgate/route"
	"github.com/loomgate/loomgate/series"
)

// State is a snapshot of admission, read by the sampler.
type State struct {
	InFlight, Queued int64
}

// Config describes what an Advisor watches.
type Config struct {
	// Settings are the admission settings, as the advice needs them.
	Settings Settings
	// Limit reads the limit in force, for a mode whose limit moves
	// (adaptive): each snapshot takes it as Settings.Workers. If nil, the
	// Settings stand as given.
	Limit func() int
	// Routes are the route classes the records' Class indexes: the ones
	// the proxy classified them by, whose names the figures carry. If nil,
	// automatic ones (route.Parse("")).
	Routes *route.Classes
	// State returns current admission state. Required.
	State func() State
	// UpstreamMetricsURL is the upstream's Prometheus endpoint (text
	// format), read by Run for the upstream's memory. If empty, the
	// upstream's memory is not read.
	UpstreamMetricsURL string
	// UpstreamMemoryMetric selects the series summed there. If its Name is
	// empty, process_resident_memory_bytes.
	UpstreamMemoryMetric series.Selector
	// SampleInterval is how often Run reads State for the window's time
	// averages. If zero, 250ms: a few samples per request at the service
	// times that matter, for a lock taken four times a second.
	SampleInterval time.Duration
	// ScrapeInterval is how often Run reads the upstream's memory. If
	// zero, 5s: a dozen readings per window, and a scrape cheap beside
	// Prometheus's own.
	ScrapeInterval time.Duration
	// Client reads UpstreamMetricsURL. If nil, a client of the package's
	// own. Each read is bounded by ScrapeInterval, and by 3s, whatever the
	// client's own timeout.
	Client *http.Client
	// Logger receives scrape failures, at debug level and at most once a
	// minute. If nil, slog.Default().
	Logger *slog.Logger
}

// DefaultMemoryMetric is the series read at UpstreamMetricsURL when
// UpstreamMemoryMetric is not set: the resident memory that every
// Prometheus client library's process collector exports.
const DefaultMemoryMetric = "process_resident_memory_bytes"

// Advisor keeps the window of the last minutes and turns it into figures,
// an estimate of the upstream and a recommendation.
type Advisor struct {
	cfg          Config
	window       *window
	memory       *memory.Fit
	scrapeErrors atomic.Int64

	// The last snapshot, kept for a bucket's time: the estimate and the
	// predictions are worth computing once per bucket, not per scrape.
	mu       sync.Mutex
	snap     Snapshot
	snapTime time.Time
}

// Snapshot is the window and the advice at one moment: what /advice and a
// status page show.
type Snapshot struct {
	// Time is when it was taken.
	Time time.Time
	// Settings are the admission settings in force.
	Settings Settings
	// Figures are the window's.
	Figures Figures
	// History is the window's buckets, oldest first, from the one in which
	// traffic began.
	History []BucketFigures
	// Recommendation is Advise(Settings, Figures).
	Recommendation Recommendation
}

// Validate reports every problem of cfg as *field.Error values joined,
// or nil.
func (cfg Config) Validate() error {
	var problems []error
	bad := func(name, problem string) {
		problems = append(problems, &field.Error{Part: "advice", Field: name, Problem: problem})
	}
	if cfg.State == nil {
		bad("State", "is required")
	}
	if cfg.SampleInterval < 0 {
		bad("SampleInterval", "is negative")
	}
	if cfg.ScrapeInterval < 0 {
		bad("ScrapeInterval", "is negative")
	}
	if cfg.Settings.MemoryBudgetBytes < 0 {
		bad("MemoryBudgetBytes", "is negative")
	}
	if cfg.UpstreamMetricsURL != "" {
		// Read with net/http, which speaks both.
		u, err := url.Parse(cfg.UpstreamMetricsURL)
		// A space is no part of a URL; url.Parse takes one in a path.
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || strings.ContainsFunc(cfg.UpstreamMetricsURL, unicode.IsSpace) {
			bad("UpstreamMetricsURL", "is not an http:// or https:// URL with a host")
		}
	}
	return errors.Join(problems...)
}

// New returns an Advisor.
func New(cfg Config) (*Advisor, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Routes == nil {
		cfg.Routes, _ = route.Parse("")
	}
	if cfg.UpstreamMemoryMetric.Name == "" {
		cfg.UpstreamMemoryMetric = series.MustParse(DefaultMemoryMetric)
	}
	if cfg.SampleInterval == 0 {
		cfg.SampleInterval = 250 * time.Millisecond
	}
	if cfg.ScrapeInterval == 0 {
		cfg.ScrapeInterval = 5 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Transport: &http.Transport{MaxIdleConns: 1, IdleConnTimeout: time.Minute}}
	}
	return &Advisor{cfg: cfg, window: newWindow(time.Now()), memory: memory.NewFit(Window)}, nil
}

// Probing marks the window from now, until Probing(false), as the time
// of a probe that caps admission: the estimate leaves it out, and reads
// the probe's steps instead. The snapshot is taken afresh after it.
func (a *Advisor) Probing(on bool) {
	a.window.setProbing(time.Now(), on)
	a.forget()
}

// BeginStep starts reading the answers of a probe's step apart.
func (a *Advisor) BeginStep() { a.window.beginStep(time.Now()) }

// EndStep ends the step begun by BeginStep, in which the upstream held
// load requests on average. With below, the step was below the
// upstream's knee (fewer admitted served fewer): its answers are the
// upstream's unloaded speed, a baseline the estimate reads for History
// as it reads a calm minute. Without, they are dropped.
func (a *Advisor) EndStep(load float64, below bool) {
	a.window.endStep(time.Now(), load, below)
	a.forget()
}

// forget drops the snapshot kept, so that the next reflects a change.
func (a *Advisor) forget() {
	a.mu.Lock()
	a.snapTime = time.Time{}
	a.mu.Unlock()
}

// Routes are the route classes the Advisor sorts requests into.
func (a *Advisor) Routes() *route.Classes { return a.cfg.Routes }

// ScrapeErrors counts failed reads of UpstreamMetricsURL.
func (a *Advisor) ScrapeErrors() int64 { return a.scrapeErrors.Load() }

// MeanService is the window's mean service time, 0 before any request was
// served: what RetryAfter needs, computed without the rest of the figures.
func (a *Advisor) MeanService() time.Duration {
	return a.window.meanService(time.Now())
}

// snapshotAge is how long a Snapshot is reused: the figures change by the
// bucket, and the predictions cost milliseconds.
const snapshotAge = time.Second

// Snapshot returns the window's figures, history and advice now, or as of
// at most a second ago.
func (a *Advisor) Snapshot() Snapshot {
	now := time.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.snapTime.IsZero() && now.Sub(a.snapTime) < snapshotAge {
		return a.snap
	}
	f := a.window.figures(now, a.cfg.Routes.Names())
	f.UpstreamMemoryBytes, f.BytesPerRequest = a.memory.Figures()
	settings := a.cfg.Settings
	if a.cfg.Limit != nil {
		settings.Workers = a.cfg.Limit()
	}
	a.snap = Snapshot{
		Time:           now,
		Settings:       settings,
		Figures:        f,
		History:        a.window.history(now),
		Recommendation: Advise(settings, f),
	}
	a.snapTime = now
	return a.snap
}

// scrapeTimeout bounds one read of the upstream's metrics: a page that
// takes longer is not worth waiting for every five seconds.
const scrapeTimeout = 3 * time.Second

// Run samples the admission state every SampleInterval for the window's
// time averages and, with an UpstreamMetricsURL, reads the upstream's
// memory every ScrapeInterval, until ctx ends. Without Run the window has
// no in-flight or queued averages.
//
// The state is sampled rather than integrated at each change so that the
// admission path stays free of clocks and locks; a few samples per service
// time estimate the time average without bias.
func (a *Advisor) Run(ctx context.Context) {
	var wg sync.WaitGroup
	if a.cfg.UpstreamMetricsURL != "" {
		wg.Go(func() { a.scrapeLoop(ctx) })
	}
	t := time.NewTicker(a.cfg.SampleInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			wg.Wait()
			return
		case now := <-t.C:
			st := a.cfg.State()
			if a.window.sample(now, st.InFlight, st.Queued) {
				a.memory.Sample(st.InFlight)
			}
		}
	}
}

func (a *Advisor) scrapeLoop(ctx context.Context) {
	t := time.NewTicker(a.cfg.ScrapeInterval)
	defer t.Stop()
	var failures int
	var lastLog time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		// Bounded inside the interval, so that a hung endpoint never
		// stacks scrapes up.
		sctx, cancel := context.WithTimeout(ctx, min(a.cfg.ScrapeInterval, scrapeTimeout))
		v, err := memory.Scrape(sctx, a.cfg.Client, a.cfg.UpstreamMetricsURL, a.cfg.UpstreamMemoryMetric)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			a.scrapeErrors.Add(1)
			failures++
			// An upstream without metrics would otherwise log every 5 s
			// forever; the counter has every failure.
			if now := time.Now(); now.Sub(lastLog) >= time.Minute {
				a.cfg.Logger.Debug("cannot read the upstream's memory; check LOOMGATE_UPSTREAM_METRICS_URL and LOOMGATE_UPSTREAM_MEMORY_METRIC",
					"url", a.cfg.UpstreamMetricsURL, "metric", a.cfg.UpstreamMemoryMetric.String(), "failures", failures, "err", err)
				lastLog, failures = now, 0
			}
			continue
		}
		a.memory.Reading(time.Now(), v)
	}
}
