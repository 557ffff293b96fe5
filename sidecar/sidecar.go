package sidecar

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/loomgate/loomgate/adaptive"
	"github.com/loomgate/loomgate/advice"
	"github.com/loomgate/loomgate/advice/levels"
	"github.com/loomgate/loomgate/internal/listen"
	"github.com/loomgate/loomgate/limiter"
	"github.com/loomgate/loomgate/metrics"
	"github.com/loomgate/loomgate/probe"
	"github.com/loomgate/loomgate/proxy"
	"github.com/loomgate/loomgate/route"
	"github.com/loomgate/loomgate/sidecar/health"
)

// ErrDrainTimeout is returned by Run when requests were still queued or in
// flight at the end of DrainTimeout.
var ErrDrainTimeout = errors.New("sidecar: drain timed out")

// Options are settings the environment does not carry.
type Options struct {
	// Logger receives the process log. If nil, slog.Default().
	Logger *slog.Logger
	// AccessLog receives one JSON line per request when Config.AccessLog
	// is "json". If nil, io.Discard.
	AccessLog io.Writer
	// Version is the build's version, for loomgate_build_info and /advice.
	// If empty, "dev".
	Version string
	// SampleInterval and ScrapeInterval override the metrics package's
	// defaults when not zero: tests that cannot wait a minute shorten them.
	SampleInterval, ScrapeInterval time.Duration
	// CgroupRoot is where the memory limit is read when
	// LOOMGATE_MAX_INFLIGHT_BYTES is auto. If empty, DefaultCgroupRoot.
	CgroupRoot string
	// Getenv reads GOMEMLIMIT for the same. If nil, os.Getenv.
	Getenv func(string) string
	// Controller, in adaptive mode, builds the controller that moves the
	// limit in place of package adaptive's: the lab runs reference
	// algorithms through it. If nil, package adaptive's.
	Controller func(ControllerHooks) Controller
}

// Sidecar is the proxy with its limiter, metrics and admin endpoints: what
// `loomgate proxy` runs, and what the demo and the tests run in-process.
type Sidecar struct {
	cfg     Config
	version string
	log     *slog.Logger
	// policy is the admission policy the configuration chose.
	policy   *policy
	proxy    *proxy.Proxy
	registry *prometheus.Registry
	metrics  *metrics.Metrics
	advisor  *advice.Advisor
	// controller moves the limit in adaptive mode; nil in the others.
	controller Controller
	// adaptive is package adaptive's controller when it is the one
	// (Options.Controller plugs none in its place): /advice shows its
	// limit and changes, and a probe hands it what it finds.
	adaptive *adaptive.Controller
	// probe finds out what an upstream seen only at its present load
	// does with fewer admitted; nil when LOOMGATE_PROBE is off.
	probe *probe.Controller
	admin *http.Server
	ready atomic.Bool
	// health follows whether the upstream answers: the log, the status
	// page and /readyz read it.
	health *health.Health
	// levels is each priority level's last minute, for /advice and the
	// status page; nil without priorities.
	levels *levels.Window
}

// New validates cfg and builds the parts; nothing listens yet.
func New(cfg Config, opts Options) (*Sidecar, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return build(cfg, opts)
}

// build builds the parts from a cfg already validated: ParseEnv validates
// what it returns, so that a start from the environment checks each rule
// once.
func build(cfg Config, opts Options) (*Sidecar, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.AccessLog == nil {
		opts.AccessLog = io.Discard
	}
	if opts.Version == "" {
		opts.Version = "dev"
	}
	var limit MemoryLimit
	if cfg.MaxInFlightBytes == SizeAuto || cfg.MaxConns == CountAuto {
		limit = ReadMemoryLimit(opts.CgroupRoot, opts.Getenv)
	}
	if cfg.MaxInFlightBytes == SizeAuto {
		cfg.MaxInFlightBytes = AutoSize(inflightBound(limit))
		if limit.Bytes > 0 && int64(cfg.MaxInFlightBytes) < proxy.RequestOverheadBytes {
			// Written by hand, such a bound stops the start (Validate);
			// derived, it would refuse every request, which protects
			// nothing: none, and a warning.
			opts.Logger.Warn("no memory bulkhead: half the memory limit is less than a request without a body reserves, and would refuse every request; set LOOMGATE_MAX_INFLIGHT_BYTES to choose, or raise the limit",
				"LOOMGATE_MAX_INFLIGHT_BYTES", "auto", "limit", Size(limit.Bytes).String(), "source", limit.Source,
				"least", Size(proxy.RequestOverheadBytes).String())
			cfg.MaxInFlightBytes = 0
		} else if limit.Bytes > 0 {
			opts.Logger.Info("memory bulkhead from the memory limit; set LOOMGATE_MAX_INFLIGHT_BYTES to choose, 0 for none",
				"LOOMGATE_MAX_INFLIGHT_BYTES", cfg.MaxInFlightBytes.String(), "limit", Size(limit.Bytes).String(), "source", limit.Source)
		} else {
			// The configuration line then shows 0, which reads as a
			// choice; say it is auto's answer, and why.
			opts.Logger.Info("no memory bulkhead: LOOMGATE_MAX_INFLIGHT_BYTES=auto found no memory limit (neither GOMEMLIMIT nor a cgroup limit); set it to bound the bytes requests in flight hold",
				"LOOMGATE_MAX_INFLIGHT_BYTES", cfg.MaxInFlightBytes.String())
		}
	}
	if cfg.MaxConns == CountAuto {
		cfg.MaxConns = AutoCount(autoConns(cfg, limit, opts.Logger))
	} else if files := openFileLimit(); files > 0 && int(cfg.MaxConns) > files {
		opts.Logger.Warn("LOOMGATE_MAX_CONNS is above the open-file limit; the limit is the real bound, and upstream connections may then fail",
			"LOOMGATE_MAX_CONNS", int(cfg.MaxConns), "open_file_limit", files)
	}
	s := &Sidecar{cfg: cfg, version: opts.Version, log: opts.Logger, registry: prometheus.NewRegistry()}
	s.health = health.New(s.log, cfg.Upstream, cfg.ReadyFollowsUpstream)
	pol, err := s.newPolicy(cfg)
	if err != nil {
		return nil, err
	}
	s.policy = pol
	lim := pol.held
	stats := lim.Stats()
	// Read and checked once, with the rest of the configuration; each
	// request is classified once, as it meets admission.
	routes := cfg.Routes.Classes()
	// The advice describes what is really in force: in a dry run, that is
	// pass-through (no memory bulkhead either), beside the mode it counts
	// for; in adaptive mode, the limit of the moment (the shadow's, in a
	// dry run of it).
	settings := advice.Settings{
		Mode:    cfg.Mode,
		Workers: cfg.Workers, QueueSize: cfg.QueueSize, QueueTimeout: cfg.QueueTimeout,
		Bulkhead: cfg.Bulkhead, BulkheadWait: cfg.BulkheadWait,
		MaxInFlightBytes:  stats.MaxBytes,
		MemoryBudgetBytes: int64(cfg.MemoryBudgetBytes),
		OverheadBytes:     proxy.RequestOverheadBytes,
		Probe:             cfg.ProbeOn(),
		AdaptiveMin:       cfg.AdaptiveMin, AdaptiveMax: cfg.AdaptiveMax,
		DryRun: cfg.DryRun,
	}
	s.advisor, err = advice.New(advice.Config{
		Limit:    pol.limit,
		Settings: settings,
		Routes:   routes,
		State: func() advice.State {
			st := lim.Stats()
			return advice.State{InFlight: st.InFlight, Queued: st.Queued}
		},
		UpstreamMetricsURL:   cfg.UpstreamMetricsURL,
		UpstreamMemoryMetric: cfg.UpstreamMemoryMetric,
		SampleInterval:       opts.SampleInterval,
		ScrapeInterval:       opts.ScrapeInterval,
		Logger:               s.log,
	})
	if err != nil {
		return nil, err
	}
	s.metrics, err = metrics.New(metrics.Config{
		Registerer:       s.registry,
		Mode:             cfg.Mode.String(),
		QueueLimit:       stats.QueueLimit,
		MaxInFlightBytes: stats.MaxBytes,
		Version:          s.version,
		State: func() metrics.State {
			st := lim.Stats()
			// The limit is the mode's: in a dry run, the one it shadows.
			limit := pol.decides.Stats().Limit
			return metrics.State{InFlight: st.InFlight, Queued: st.Queued, Bytes: st.Bytes, Limit: int64(limit), Probe: int64(st.Probe)}
		},
		TakePeaks:          lim.TakePeaks,
		RequestSeconds:     lim.RequestSeconds,
		Advice:             s.gauges,
		LimitChangeReasons: limitChangeReasons(),
		ProbeResults:       probeResults(),
		Levels:             levelNames(cfg.priorities().On()),
		LevelState: func() []metrics.LevelState {
			// The mode's limiter: in a dry run, the shadow's levels.
			var out []metrics.LevelState
			for _, st := range pol.decides.Levels() {
				out = append(out, metrics.LevelState{InFlight: st.InFlight, Queued: st.Queued})
			}
			return out
		},
		SampleInterval: opts.SampleInterval,
		MaxClientConns: int(cfg.MaxConns),
		Connections: func() metrics.Connections {
			// s.proxy is set below, before anything scrapes.
			return metrics.Connections{Open: s.proxy.ClientConns(), AcceptErrors: s.proxy.AcceptErrors()}
		},
		MaxUpgraded: cfg.MaxUpgraded,
		Upgraded: func() metrics.Upgraded {
			u := s.proxy.UpgradedStats()
			return metrics.Upgraded{Open: u.Open, FromClient: u.FromClient, ToClient: u.ToClient}
		},
	})
	if err != nil {
		return nil, err
	}
	if s.controller, err = s.newController(pol, opts.Controller); err != nil {
		return nil, err
	}
	if cfg.ProbeOn() {
		if s.probe, err = s.newProbe(lim); err != nil {
			return nil, err
		}
	}
	if names := levelNames(cfg.priorities().On()); names != nil {
		s.levels = levels.New(names)
	}
	obs := &observer{metrics: s.metrics, advisor: s.advisor, levels: s.levels, controller: s.controller, probe: s.probe, health: s.health, routes: routes}
	if cfg.AccessLog == "json" {
		obs.access = slog.New(slog.NewJSONHandler(opts.AccessLog, nil))
	}
	s.proxy, err = proxy.New(proxy.Config{
		Priorities:      cfg.priorities().Priorities,
		Upstream:        cfg.Upstream,
		Policy:          pol.admits,
		Observer:        obs,
		Classes:         routes,
		UpstreamTimeout: cfg.UpstreamTimeout,
		HeaderTimeout:   cfg.HeaderTimeout,
		BodyTimeout:     cfg.BodyTimeout,
		MaxBodyBytes:    int64(cfg.MaxBodyBytes),
		// One connection per permit: the pool can never be a second queue.
		MaxConns:       stats.Limit,
		MaxClientConns: int(cfg.MaxConns),
		ServerTiming:   cfg.ServerTiming,
		RejectStatus:   cfg.RejectStatus,
		// Every request reserves what it may hold, so that
		// loomgate_in_flight_bytes means something with or without a
		// memory bulkhead.
		Reserve:    proxy.RequestBytes,
		RetryAfter: s.retryAfter,
		// An upgraded connection holds no permit after its 101; it is
		// bounded and timed on its own.
		MaxUpgraded:         cfg.MaxUpgraded,
		UpgradedIdleTimeout: cfg.UpgradedIdleTimeout,
		UpgradedClosed:      func(u proxy.Upgraded) { s.metrics.RecordUpgraded(u.Life) },
		Logger:              s.log,
	})
	if err != nil {
		return nil, err
	}
	s.admin = &http.Server{
		Handler:           s.adminHandler(),
		ReadHeaderTimeout: 10 * time.Second,
		// Scrapes and probes come every few seconds; a connection idle
		// longer holds a descriptor for nobody.
		IdleTimeout: adminIdleTimeout,
		ErrorLog:    slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	return s, nil
}

// autoConns is LOOMGATE_MAX_CONNS=auto's bound under cfg (its memory
// bulkhead resolved) and the memory limit: the lower of the open-file
// limit's and the memory limit's, each logged with what to change.
func autoConns(cfg Config, limit MemoryLimit, log *slog.Logger) int {
	files := openFileLimit()
	pool := upstreamPool(cfg)
	bound, ok := connsBound(files, pool)
	if !ok {
		log.Warn("the open-file limit leaves too few descriptors for the admission limit; raise the limit (ulimit -n) or lower the limit",
			"open_file_limit", files, "LOOMGATE_MAX_CONNS", bound)
	}
	mem := connsMemoryBound(limit.Bytes, int64(cfg.MaxInFlightBytes))
	if mem == 0 || bound > 0 && bound <= mem {
		return bound
	}
	log.Info("client connections bounded by the memory limit: beyond, new ones wait in the listen backlog; set LOOMGATE_MAX_CONNS to choose",
		"LOOMGATE_MAX_CONNS", mem, "limit", Size(limit.Bytes).String(), "source", limit.Source,
		"LOOMGATE_MAX_INFLIGHT_BYTES", cfg.MaxInFlightBytes.String(), "per_connection", Size(proxy.ClientConnBytes).String())
	if mem < pool {
		log.Warn("the memory limit leaves room for fewer client connections than the admission limit; raise the memory limit, or lower the admission limit or LOOMGATE_MAX_INFLIGHT_BYTES",
			"LOOMGATE_MAX_CONNS", mem, "admission_limit", pool)
	}
	return mem
}

// The admin port's connections are bounded, and idle ones closed: 21,000
// idle connections to the admin port took every descriptor, so that the
// traffic port answered nothing. Beyond the bound a connection waits in
// the listen backlog until one closes. The bound is not the 64 descriptors
// MAX_CONNS=auto leaves the process (reservedFiles): probes and scrapes
// need a few, but at 32, as many silent connections kept /healthz from
// being answered, and a liveness probe would have restarted the pod.
const (
	adminConns       = 512
	adminIdleTimeout = 15 * time.Second
)

// adminListener bounds the admin port's connections open at once to
// adminConns, and retries the accepts that more time can cure.
func (s *Sidecar) adminListener(ln net.Listener) net.Listener {
	l := listen.New(ln, adminConns, nil, func(err error) {
		// Few: the retries back off to one a second.
		s.log.Warn("accepting an admin connection failed; retrying", "err", err)
	})
	s.admin.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateClosed || st == http.StateHijacked {
			l.ConnClosed()
		}
	}
	return l
}

// Run serves traffic on ln and the admin endpoints on adminLn until ctx
// ends, then drains: /readyz fails, ln closes, and queued and in-flight
// requests have DrainTimeout to finish. It returns nil after a complete
// drain, ErrDrainTimeout after an incomplete one, or the error of a
// listener that failed (after draining what it could).
func (s *Sidecar) Run(ctx context.Context, ln, adminLn net.Listener) error {
	// Each part runs in the group; the first to fail ends the others' run
	// as ctx's end does.
	g, gctx := newGroup(ctx)
	// The window's sampler and the upstream's scraper run for as long as
	// the admin listener, which shows what they measure.
	runCtx, stopRun := context.WithCancel(context.Background())
	defer stopRun()
	g.Go(func() error {
		s.metrics.Run(runCtx)
		return nil
	})
	g.Go(func() error {
		s.advisor.Run(runCtx)
		return nil
	})
	if s.controller != nil {
		g.Go(func() error {
			s.controller.Run(runCtx)
			return nil
		})
	}
	// A probe ends, and lifts its cap, as the drain begins: the requests
	// it holds back are to be served, not held until the drain rejects
	// them.
	probeCtx, stopProbe := context.WithCancel(runCtx)
	defer stopProbe()
	if s.probe != nil {
		g.Go(func() error {
			s.probe.Run(probeCtx)
			return nil
		})
	}
	if s.policy.beside != nil {
		g.Go(func() error {
			s.policy.beside(runCtx)
			return nil
		})
	}
	g.Go(func() error {
		if err := s.admin.Serve(s.adminListener(adminLn)); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("admin listener: %w", err)
		}
		return nil
	})
	served := make(chan struct{})
	g.Go(func() error {
		defer close(served)
		// Serve returns nil once Shutdown has closed the listener.
		if err := s.proxy.Serve(ln); err != nil {
			return fmt.Errorf("traffic listener: %w", err)
		}
		return nil
	})
	s.ready.Store(true)
	var drainErr error
	g.Go(func() error {
		<-gctx.Done()
		stopProbe()
		drainErr = s.shutdown()
		stopRun()
		return nil
	})
	err := g.Wait()
	if err == nil {
		err = drainErr
	}
	s.policy.close()
	return err
}

// shutdown fails readiness, stops accepting traffic and waits up to
// DrainTimeout for queued and in-flight requests to finish, then stops the
// admin listener.
func (s *Sidecar) shutdown() error {
	s.ready.Store(false)
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.DrainTimeout)
	defer cancel()
	err := s.proxy.Shutdown(ctx)
	if err != nil {
		// The proxy has answered what was left, and logged how many.
		s.log.Warn("drain timed out; raise LOOMGATE_DRAIN_TIMEOUT if this repeats",
			"timeout", s.cfg.DrainTimeout.String())
		err = ErrDrainTimeout
	}
	// The admin listener outlives the drain so that the last scrape sees it.
	actx, acancel := context.WithTimeout(context.Background(), time.Second)
	defer acancel()
	_ = s.admin.Shutdown(actx)
	return err
}

// Stats is admission's state now: what is held for real.
func (s *Sidecar) Stats() limiter.Stats { return s.policy.held.Stats() }

// Gatherer is the sidecar's Prometheus registry, what /metrics serves.
func (s *Sidecar) Gatherer() prometheus.Gatherer { return s.registry }

// Config is the configuration the sidecar runs with.
func (s *Sidecar) Config() Config { return s.cfg }

// observer turns proxy Outcomes into metrics, the advice's window and
// access log lines.
type observer struct {
	metrics    *metrics.Metrics
	advisor    *advice.Advisor
	levels     *levels.Window    // nil without priorities
	controller Controller        // nil outside adaptive mode
	probe      *probe.Controller // nil when LOOMGATE_PROBE is off
	access     *slog.Logger      // nil when the access log is off
	health     *health.Health
	routes     *route.Classes // what each Outcome's Class indexes
}

func (o *observer) Observe(out *proxy.Outcome) {
	o.metrics.Record(out)
	o.health.Observe(out)
	o.advisor.Record(out)
	if o.levels != nil {
		o.levels.Record(out)
	}
	if out.Admitted && out.Answered() {
		if o.controller != nil {
			o.controller.Record(out.Class, out.Service)
		}
		if o.probe != nil {
			o.probe.Record(out.Service)
		}
	}
	if o.access != nil {
		o.log(out)
	}
}

// log writes the access log line of out. A function of its own: its
// attributes take most of a kilobyte of stack, which Observe, on every
// request's deepest path, would otherwise reserve whether the log is on or
// not, and a goroutine that needs more than its 4 KiB stack holds 8 KiB
// from then on.
func (o *observer) log(out *proxy.Outcome) {
	remote, class := "", ""
	if out.Remote != nil {
		remote = out.Remote.String()
	}
	if names := o.routes.Names(); out.Admission && out.Class < len(names) {
		class = names[out.Class]
	}
	o.access.LogAttrs(context.Background(), slog.LevelInfo, "request",
		slog.String("method", string(out.Method)),
		slog.String("target", string(out.Target)),
		slog.String("route", class),
		slog.String("remote", remote),
		slog.Int("status", out.Status),
		slog.Int("upstream_status", out.UpstreamStatus),
		slog.String("outcome", out.Kind.String()),
		slog.Float64("queue_ms", millis(out.Queue)),
		slog.Float64("service_ms", millis(out.Service)),
		slog.Float64("total_ms", millis(out.Total)),
	)
}

func millis(d time.Duration) float64 {
	return float64(d.Microseconds()) / 1000
}

// newProbe builds the probe over lim, the limiter whose admission it caps
// for a few seconds: wanted while whether the upstream queues inside is
// unknown for want of a calmer load, and, in adaptive mode, only while
// admission is open (a limit in force learns by its own trials).
func (s *Sidecar) newProbe(lim *limiter.Limiter) (*probe.Controller, error) {
	return probe.New(probe.Config{
		Cap: lim.SetProbe,
		State: func() probe.State {
			st := lim.Stats()
			return probe.State{InFlight: st.InFlight, Queued: st.Queued}
		},
		Wanted: func() bool {
			// A controller learns the upstream by its own means: package
			// adaptive's by its trials, once it has a limit.
			if s.controller != nil && (s.adaptive == nil || s.adaptive.Limit() > 0) {
				return false
			}
			// Ten seconds of traffic first: a calm start gives way to the
			// load within seconds, and the estimate then compares them.
			// Wanted where nothing calmer was seen, and where the calmest
			// load seen may already have been past the knee (open arrivals
			// above capacity from the first second): the capacity is then
			// known to be at most a figure, and the probe finds it.
			f := s.advisor.Snapshot().Figures
			e := f.Estimate
			return f.Span >= probeAfter && f.Requests >= advice.MinRequests && (e.NeverCalm || !math.IsNaN(e.CapacityAtMost))
		},
		Overrun: func() bool {
			// Requests admitted faster than they are answered, for a
			// second: in adaptive mode with admission open, at once, for a
			// limit before the upstream's queue grows past what clients
			// wait for (the controller limits such a load itself within
			// two ticks, where it saw the upstream calm before). Outside
			// adaptive mode the probe only informs the advice, and waits
			// for Wanted.
			if s.adaptive == nil || s.adaptive.Limit() > 0 {
				return false
			}
			e := s.advisor.Snapshot().Figures.Estimate
			return !e.Saturated || math.IsNaN(e.Capacity)
		},
		Probing: s.advisor.Probing,
		Found: func(r probe.Report) {
			// In adaptive mode the limit takes over from the probe's cap
			// before it is lifted: otherwise every request it held back
			// would reach the upstream's queue again until the next tick.
			if s.adaptive == nil {
				return
			}
			if r.Result != probe.Queueing {
				// Begun by an overrun, and ended before a step below the
				// knee: never open admission to the overrun again.
				s.adaptive.Found(float64(r.Fallback), 0, "a probe of an overrun ended without a capacity: "+r.Detail)
				return
			}
			below := r.Steps[len(r.Steps)-1].Load
			s.adaptive.Found(r.Capacity, below, "a probe found the upstream queueing inside: "+r.Detail)
		},
		Begin:    s.advisor.BeginStep,
		End:      s.advisor.EndStep,
		Logger:   s.log,
		OnReport: func(r probe.Report) { s.metrics.Probed(string(r.Result)) },
	})
}

// probeAfter is how long traffic runs before the probe may decide the
// upstream was never seen calm: two of the estimate's buckets.
const probeAfter = 2 * advice.BucketWidth

// probeResults are loomgate_probes_total's results: exported whether the
// probe is on or not (at 0), as every series a dashboard or an alert may
// read is.
func probeResults() []string {
	var rs []string
	for _, r := range probe.Results() {
		rs = append(rs, string(r))
	}
	return rs
}

// shadowEvery is how often a dry run's shadow hears the upstream's
// capacity while it queues requests, and shadowIdleEvery while it does
// not. Until it first hears, a full pool's stretched service times build
// a backlog in the shadow; each hearing may compute the advice afresh, a
// few milliseconds of CPU, which a shadow that queues nothing does not
// need every second.
const (
	shadowEvery     = time.Second
	shadowIdleEvery = 10 * time.Second
)

// tellShadow tells the dry run's shadow the upstream's capacity, as the
// estimate has it, until ctx ends: the most it serves at once, and no less
// than it was seen to serve without queueing (a pool grown since the
// estimate's capacity was measured).
func (s *Sidecar) tellShadow(ctx context.Context, shadow *limiter.Shadow) {
	t := time.NewTicker(shadowEvery)
	defer t.Stop()
	var told time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			if shadow.Limiter().Stats().Queued == 0 && now.Sub(told) < shadowIdleEvery {
				continue
			}
			told = now
		}
		e := s.advisor.Snapshot().Figures.Estimate
		c := 0.0
		switch {
		case !math.IsNaN(e.Capacity):
			c = max(e.Capacity, e.LowerBound)
		case !math.IsNaN(e.CapacityAtMost):
			// The calmest load seen may have been past the knee: the
			// capacity is no more than this, and it is what is known.
			c = max(e.CapacityAtMost, e.LowerBound)
		}
		shadow.SetCapacity(c)
	}
}

// dryRunDecision counts one of the shadow's decisions.
func (s *Sidecar) dryRunDecision(d limiter.Decision) {
	would := "admitted"
	switch {
	case d.Would == limiter.WouldQueue:
		would = "queued"
	case errors.Is(d.Err, limiter.ErrQueueFull):
		would = "rejected_queue_full"
	case errors.Is(d.Err, limiter.ErrQueueTimeout):
		would = "rejected_queue_timeout"
	case errors.Is(d.Err, limiter.ErrBulkheadFull):
		would = "rejected_bulkhead"
	case errors.Is(d.Err, limiter.ErrMemoryFull):
		// ErrTooLarge too, a body larger than the whole memory bulkhead,
		// which the mode would answer 413 (bad_request): the dry run counts
		// it with the memory's refusals, where its bytes are what it is
		// refused for, and has no would-be outcome for bad requests.
		would = "rejected_memory"
	}
	s.metrics.DryRunDecision(would, d.Wait)
}

// limitChangeReasons are the label values of loomgate_limit_changes_total.
// The counter exists in every mode, at 0 where the limit never moves, so
// that a dashboard or alert reads the same whichever mode is in force.
func limitChangeReasons() []string {
	var names []string
	for _, r := range adaptive.Reasons() {
		names = append(names, string(r))
	}
	return names
}

// levelNames are the priority levels' names by index, for the per-level
// series, when any of LOOMGATE_PRIORITIES and its kin is set; nil
// otherwise, and the series are not exported.
func levelNames(on bool) []string {
	if !on {
		return nil
	}
	names := make([]string, limiter.NumLevels)
	for i := range names {
		names[i] = limiter.Level(i).String()
	}
	return names
}
