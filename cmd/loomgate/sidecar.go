package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/loomgate/loomgate/limiter"
	"github.com/loomgate/loomgate/metrics"
	"github.com/loomgate/loomgate/proxy"
)

// runProxy is `loomgate proxy`: parse, listen, serve, drain on ctx's end.
func runProxy(ctx context.Context, environ []string, stdout, stderr io.Writer) int {
	cfg, err := parseConfig(environ)
	if err != nil {
		fmt.Fprintf(stderr, "loomgate: %v\n", err)
		return 2
	}
	log := newLogger(stderr, cfg.LogLevel)
	s, err := newSidecar(cfg, log, stdout)
	if err != nil {
		log.Error("cannot start", "err", err)
		return 1
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		log.Error("cannot listen for traffic; change LOOMGATE_LISTEN", "LOOMGATE_LISTEN", cfg.Listen, "err", err)
		return 1
	}
	adminLn, err := net.Listen("tcp", cfg.AdminListen)
	if err != nil {
		ln.Close()
		log.Error("cannot listen for admin; change LOOMGATE_ADMIN_LISTEN", "LOOMGATE_ADMIN_LISTEN", cfg.AdminListen, "err", err)
		return 1
	}
	logConfig(log, cfg)
	log.Info("serving", "traffic", ln.Addr().String(), "admin", adminLn.Addr().String(), "upstream", cfg.Upstream, "version", version)
	failed := s.serve(ln, adminLn)
	select {
	case <-ctx.Done():
		log.Info("draining", "timeout", cfg.DrainTimeout.String())
	case err := <-failed:
		log.Error("listener failed", "err", err)
		s.shutdown(cfg.DrainTimeout)
		return 1
	}
	if !s.shutdown(cfg.DrainTimeout) {
		return 1
	}
	log.Info("drained")
	return 0
}

func newLogger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level)) // validated by parseConfig
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l}))
}

// logConfig writes the effective configuration, defaults included, so that
// an operator reading the log knows what is in force without reading the
// deployment; the other mode's settings follow on a line of their own,
// marked inactive, so that what a flip of LOOMGATE_MODE would bring is
// in the log too.
func logConfig(log *slog.Logger, cfg config) {
	var active, inactive []any
	for _, v := range configVars() {
		if v.Mode != "" && v.Mode != cfg.Mode {
			inactive = append(inactive, v.Name, configValue(cfg, v))
			continue
		}
		active = append(active, v.Name, configValue(cfg, v))
	}
	log.Info("configuration", active...)
	log.Info("inactive in LOOMGATE_MODE="+cfg.Mode+"; in force after a flip of the mode", inactive...)
}

// sidecar is the proxy with its limiter, metrics and admin endpoints: what
// `loomgate proxy` runs, and what demo and the tests run in-process.
type sidecar struct {
	cfg      config
	log      *slog.Logger
	limiter  *limiter.Limiter
	proxy    *proxy.Proxy
	registry *prometheus.Registry
	metrics  *metrics.Metrics
	admin    *http.Server
	ready    atomic.Bool

	// stopRun ends the metrics' sampler and scraper; runDone is closed once
	// they have stopped.
	stopRun context.CancelFunc
	runDone chan struct{}
}

// sidecarOptions are settings the environment does not carry.
type sidecarOptions struct {
	// sampleInterval and scrapeInterval override the metrics package's
	// defaults when not zero: tests that cannot wait a minute shorten them.
	sampleInterval, scrapeInterval time.Duration
}

// newSidecar builds the parts; nothing listens yet. Access log lines, when
// enabled, go to accessLog.
func newSidecar(cfg config, log *slog.Logger, accessLog io.Writer) (*sidecar, error) {
	return newSidecarWith(cfg, log, accessLog, sidecarOptions{})
}

func newSidecarWith(cfg config, log *slog.Logger, accessLog io.Writer, opts sidecarOptions) (*sidecar, error) {
	s := &sidecar{cfg: cfg, log: log, registry: prometheus.NewRegistry()}
	lcfg := limiter.Config{MaxInFlightBytes: int64(cfg.MaxInflightBytes)}
	if cfg.Mode == "fixed" {
		lcfg.Mode, lcfg.Workers, lcfg.QueueSize, lcfg.QueueTimeout = limiter.Fixed, cfg.Workers, cfg.QueueSize, cfg.QueueTimeout
	} else {
		lcfg.Mode, lcfg.Bulkhead, lcfg.BulkheadWait = limiter.Unbounded, cfg.Bulkhead, cfg.BulkheadWait
	}
	lim, err := limiter.New(lcfg)
	if err != nil {
		return nil, err
	}
	s.limiter = lim
	stats := lim.Stats()
	// Validated by parseConfig; parsed again here for its value.
	memorySelector, err := metrics.ParseSelector(cfg.UpstreamMemoryMetric)
	if err != nil {
		return nil, fmt.Errorf("LOOMGATE_UPSTREAM_MEMORY_METRIC: %w", err)
	}
	s.metrics, err = metrics.New(metrics.Config{
		Registerer:       s.registry,
		Outcomes:         outcomeNames(),
		Mode:             cfg.Mode,
		Limit:            stats.Limit,
		QueueLimit:       stats.QueueLimit,
		MaxInFlightBytes: stats.MaxBytes,
		Version:          version,
		State: func() metrics.State {
			st := lim.Stats()
			return metrics.State{InFlight: st.InFlight, Queued: st.Queued, Bytes: st.Bytes}
		},
		TakePeaks:            lim.TakePeaks,
		MemoryBudgetBytes:    int64(cfg.MemoryBudgetBytes),
		UpstreamMetricsURL:   cfg.UpstreamMetricsURL,
		UpstreamMemoryMetric: memorySelector,
		SampleInterval:       opts.sampleInterval,
		ScrapeInterval:       opts.scrapeInterval,
		Logger:               log,
	})
	if err != nil {
		return nil, err
	}
	obs := &observer{metrics: s.metrics}
	if cfg.AccessLog == "json" {
		obs.access = slog.New(slog.NewJSONHandler(accessLog, nil))
	}
	s.proxy, err = proxy.New(proxy.Config{
		Upstream:        cfg.Upstream,
		Admitter:        lim,
		Observer:        obs,
		UpstreamTimeout: cfg.UpstreamTimeout,
		MaxBodyBytes:    int64(cfg.MaxBodyBytes),
		HeaderTimeout:   cfg.HeaderTimeout,
		BodyTimeout:     cfg.BodyTimeout,
		// One connection per permit: the pool can never be a second queue.
		MaxConns:     stats.Limit,
		ServerTiming: cfg.ServerTiming,
		// Every request reserves what it may hold, so that
		// loomgate_in_flight_bytes means something with or without a
		// memory bulkhead.
		Reserve:    proxy.RequestBytes,
		RetryAfter: s.retryAfter,
		Logger:     log,
	})
	if err != nil {
		return nil, err
	}
	s.admin = &http.Server{
		Handler:           s.adminHandler(),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	return s, nil
}

// serve starts both listeners; the channel reports the first that fails.
func (s *sidecar) serve(ln, adminLn net.Listener) <-chan error {
	failed := make(chan error, 2)
	// The window's sampler and the upstream's scraper run for as long as
	// the admin listener, which shows what they measure.
	ctx, cancel := context.WithCancel(context.Background())
	s.stopRun, s.runDone = cancel, make(chan struct{})
	go func() {
		defer close(s.runDone)
		s.metrics.Run(ctx)
	}()
	go func() {
		if err := s.admin.Serve(adminLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
			failed <- fmt.Errorf("admin listener: %w", err)
		}
	}()
	go func() {
		if err := s.proxy.Serve(ln); err != nil {
			failed <- fmt.Errorf("traffic listener: %w", err)
		}
	}()
	s.ready.Store(true)
	return failed
}

// shutdown fails readiness, stops accepting traffic and waits up to timeout
// for queued and in-flight requests to finish, then stops the admin
// listener. It reports whether everything finished in time.
func (s *sidecar) shutdown(timeout time.Duration) bool {
	s.ready.Store(false)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err := s.proxy.Shutdown(ctx)
	if err != nil {
		st := s.limiter.Stats()
		s.log.Warn("drain timed out; raise LOOMGATE_DRAIN_TIMEOUT if this repeats",
			"timeout", timeout.String(), "in_flight", st.InFlight, "queued", st.Queued)
	}
	// The admin listener outlives the drain so that the last scrape sees it.
	actx, acancel := context.WithTimeout(context.Background(), time.Second)
	defer acancel()
	_ = s.admin.Shutdown(actx)
	if s.stopRun != nil {
		s.stopRun()
		<-s.runDone
	}
	return err == nil
}

// observer turns proxy Outcomes into metrics and access log lines.
type observer struct {
	metrics *metrics.Metrics
	access  *slog.Logger // nil when the access log is off
}

func (o *observer) Observe(out *proxy.Outcome) {
	o.metrics.Record(metrics.Sample{
		Outcome:        out.Kind.String(),
		UpstreamStatus: out.UpstreamStatus,
		Admission:      out.Admission,
		Admitted:       out.Admitted,
		Queue:          out.Queue,
		Service:        out.Service,
		Total:          out.Total,
	})
	if o.access == nil {
		return
	}
	remote := ""
	if out.Remote != nil {
		remote = out.Remote.String()
	}
	o.access.LogAttrs(context.Background(), slog.LevelInfo, "request",
		slog.String("method", string(out.Method)),
		slog.String("target", string(out.Target)),
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

// outcomeNames are the proxy's outcome kinds as label values.
func outcomeNames() []string {
	var names []string
	for _, k := range proxy.Kinds() {
		names = append(names, k.String())
	}
	return names
}
