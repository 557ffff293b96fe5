package metrics

import (
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/loomgate/loomgate/field"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/loomgate/loomgate/internal/outcome"
)

// Buckets are the classic histogram buckets, in seconds, from 100µs to 60s:
// wide enough for a cache hit and for a request that waited out the default
// queue timeout. A native histogram is kept beside them for Prometheus
// servers that scrape it.
var Buckets = bucketBounds[:]

// bucketBounds is Buckets as an array, so that the window's per-bucket
// histograms can be arrays of its length and cost no allocation.
var bucketBounds = [...]float64{
	0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
	0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60,
}

// State is a snapshot of admission, read at each scrape.
type State struct {
	InFlight, Queued, Bytes int64
	// Limit is the concurrency limit in force, 0 when there is none: it
	// moves in adaptive mode.
	Limit int64
	// Probe is a probe's cap in force, 0 when none is.
	Probe int64
}

// Config describes the sidecar being measured.
type Config struct {
	// Registerer receives every collector. Required; the process's
	// metrics need not live in a global registry.
	Registerer prometheus.Registerer
	// Mode is "fixed" or "unbounded", for loomgate_mode_info.
	Mode string
	// QueueLimit is the queue's bound, 0 when there is none. (The
	// concurrency limit is read from State, as it may move.)
	QueueLimit int
	// LimitChangeReasons are the values of loomgate_limit_changes_total's
	// reason label, created at once. If empty, the counter is not
	// exported.
	LimitChangeReasons []string
	// ProbeResults are the values of loomgate_probes_total's result
	// label, created at once. If empty, the counter is not exported.
	ProbeResults []string
	// MaxInFlightBytes is the memory bulkhead, 0 when there is none.
	MaxInFlightBytes int64
	// Version is the build's version, for loomgate_build_info.
	Version string
	// State returns current admission state. Required.
	State func() State
	// TakePeaks returns the highest in-flight, queued and bytes since its
	// previous call and starts a new period. Metrics keeps what it returns
	// for PeakWindow, for every scraper; nothing else may call it. Required.
	TakePeaks func() (inFlight, queued, bytes int64)
	// RequestSeconds returns the time-integrals of the requests in flight
	// and of those queued, in request-seconds, which must never decrease:
	// loomgate_in_flight_seconds_total and loomgate_queued_seconds_total.
	// If nil, the two counters are not exported.
	RequestSeconds func() (inFlight, queued float64)

	// MaxClientConns is the bound on client connections, 0 when there is
	// none.
	MaxClientConns int
	// Connections reads the client connections' figures at each scrape.
	// If nil, they read 0.
	Connections func() Connections

	// MaxUpgraded is the bound on upgraded connections (WebSocket), 0 when
	// there is none.
	MaxUpgraded int
	// Upgraded reads the upgraded connections' figures at each scrape. If
	// nil, they read 0.
	Upgraded func() Upgraded

	// Advice supplies the advice's numbers, read at each scrape. If nil,
	// the advice gauges read unknown.
	Advice func() Advice
	// SampleInterval is how often Run folds the limiter's peaks in. If
	// zero, 250ms.
	SampleInterval time.Duration

	// Levels names the priority levels by their index (an
	// outcome.Record's Level), when admission orders requests by them
	// (LOOMGATE_PRIORITIES and its kin). If empty, the per-level series
	// are not exported.
	Levels []string
	// LevelState reads each level's requests in flight and waiting, by
	// index, at each scrape. Required with Levels.
	LevelState func() []LevelState
}

// LevelState is one priority level's admission state.
type LevelState struct{ InFlight, Queued int64 }

// DryRunDecisions are the values of loomgate_dry_run_requests_total's
// would label.
var DryRunDecisions = []string{"admitted", "queued", "rejected_queue_full", "rejected_queue_timeout", "rejected_bulkhead", "rejected_memory"}

// Connections are the traffic listener's figures.
type Connections struct {
	// Open is the client connections open now.
	Open int64
	// AcceptErrors counts accepts that failed and were retried, most
	// often for want of file descriptors.
	AcceptErrors uint64
}

// Upgraded are the upgraded connections' figures.
type Upgraded struct {
	// Open is the upgraded connections open now.
	Open int64
	// FromClient and ToClient are the bytes relayed each way so far.
	FromClient, ToClient uint64
}

// Metrics records finished requests and exports them with the admission
// state and the advice's numbers.
type Metrics struct {
	// requests is loomgate_requests_total's series, indexed by kind: no
	// label lookup per request.
	requests        [outcome.NumKinds]prometheus.Counter
	upstreamClasses [5]prometheus.Counter
	queueWait       prometheus.Histogram
	service         prometheus.Histogram
	total           prometheus.Histogram
	upgradedLife    prometheus.Histogram

	cfg          Config
	peaks        *peaks
	limitChanges map[string]prometheus.Counter
	probes       map[string]prometheus.Counter
	dryRun       map[string]prometheus.Counter
	dryRunWait   prometheus.Histogram

	// levelRequests and levelWait are the per-level series, by level
	// index, nil without Config.Levels.
	levelRequests [][outcome.NumKinds]prometheus.Counter
	levelWait     []prometheus.Observer
}

// Validate reports every problem of cfg as *field.Error values joined,
// or nil.
func (cfg Config) Validate() error {
	var problems []error
	bad := func(name, problem string) {
		problems = append(problems, &field.Error{Part: "metrics", Field: name, Problem: problem})
	}
	if cfg.Registerer == nil {
		bad("Registerer", "is required")
	}
	if cfg.State == nil {
		bad("State", "is required")
	}
	if cfg.TakePeaks == nil {
		bad("TakePeaks", "is required")
	}
	if cfg.SampleInterval < 0 {
		bad("SampleInterval", "is negative")
	}
	if len(cfg.Levels) > 0 && cfg.LevelState == nil {
		bad("LevelState", "is required with Levels")
	}
	return errors.Join(problems...)
}

// New registers loomgate's collectors, the Go runtime's and the process's
// with cfg.Registerer.
func New(cfg Config) (*Metrics, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.SampleInterval == 0 {
		cfg.SampleInterval = 250 * time.Millisecond
	}
	if cfg.Advice == nil {
		cfg.Advice = noAdvice
	}
	capacity := newCapacityCollector(cfg)
	if cfg.Connections == nil {
		cfg.Connections = func() Connections { return Connections{} }
	}
	if cfg.Upgraded == nil {
		cfg.Upgraded = func() Upgraded { return Upgraded{} }
	}
	m := &Metrics{
		cfg:   cfg,
		peaks: newPeaks(time.Now(), cfg.TakePeaks),
	}

	requests := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "loomgate_requests_total",
		Help: "Requests finished, by outcome.",
	}, []string{"outcome"})
	// Every outcome's series exists from the start, so that rate() and
	// alerts work before the first rejection.
	for _, k := range outcome.Kinds() {
		m.requests[k] = requests.WithLabelValues(k.String())
	}
	upstream := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "loomgate_upstream_responses_total",
		Help: "Responses received from the upstream, by status class.",
	}, []string{"code_class"})
	for i := range m.upstreamClasses {
		m.upstreamClasses[i] = upstream.WithLabelValues(fmt.Sprintf("%dxx", i+1))
	}
	histogram := func(name, help string) prometheus.Histogram {
		return prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:                            name,
			Help:                            help,
			Buckets:                         Buckets,
			NativeHistogramBucketFactor:     1.1,
			NativeHistogramMaxBucketNumber:  160,
			NativeHistogramMinResetDuration: time.Hour,
		})
	}
	m.queueWait = histogram("loomgate_queue_wait_seconds", "Time from the request being read to its admission or rejection.")
	m.service = histogram("loomgate_service_seconds", "Time from admission to the upstream's last response byte.")
	m.total = histogram("loomgate_request_seconds", "Time from the request being read to its response being written.")
	m.upgradedLife = histogram("loomgate_upgraded_seconds", "Life of upgraded connections (WebSocket), from the 101 to the close.")
	upgradedBytes := func(direction string, f func(Upgraded) uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "loomgate_upgraded_bytes_total", Help: "Bytes relayed on upgraded connections, by direction.",
			ConstLabels: prometheus.Labels{"direction": direction},
		}, func() float64 { return float64(f(cfg.Upgraded())) })
	}

	gauge := func(name, help string, f func(State) int64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help},
			func() float64 { return float64(f(cfg.State())) })
	}
	constant := func(name, help string, v float64, labels prometheus.Labels) prometheus.Collector {
		g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: labels})
		g.Set(v)
		return g
	}
	cs := []prometheus.Collector{
		requests, upstream, m.queueWait, m.service, m.total,
		gauge("loomgate_in_flight", "Requests admitted and not finished.", func(s State) int64 { return s.InFlight }),
		gauge("loomgate_queued", "Requests waiting for admission.", func(s State) int64 { return s.Queued }),
		gauge("loomgate_in_flight_bytes", "Bytes reserved by admitted and waiting requests.", func(s State) int64 { return s.Bytes }),
		gauge("loomgate_limit", "Enforced concurrency limit, 0 when there is none; in adaptive mode, the limit in force now.", func(s State) int64 { return s.Limit }),
		gauge("loomgate_probe_limit", "A probe's cap on admission while it lasts (LOOMGATE_PROBE), 0 when none.", func(s State) int64 { return s.Probe }),
		constant("loomgate_queue_limit", "Most requests allowed to wait, 0 when the queue is bounded by time alone or absent.", float64(cfg.QueueLimit), nil),
		constant("loomgate_max_in_flight_bytes", "Memory bulkhead in bytes, 0 when there is none.", float64(cfg.MaxInFlightBytes), nil),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "loomgate_client_connections", Help: "Client connections open on the traffic listener."},
			func() float64 { return float64(cfg.Connections().Open) }),
		constant("loomgate_client_connections_limit", "Most client connections open at once (LOOMGATE_MAX_CONNS), 0 when unbounded; beyond it new connections wait to be accepted.", float64(cfg.MaxClientConns), nil),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "loomgate_accept_errors_total", Help: "Accepts on the traffic listener that failed and were retried, most often for want of file descriptors."},
			func() float64 { return float64(cfg.Connections().AcceptErrors) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "loomgate_upgraded_connections", Help: "Upgraded connections (WebSocket) open; their handshakes are counted in loomgate_requests_total."},
			func() float64 { return float64(cfg.Upgraded().Open) }),
		constant("loomgate_upgraded_connections_limit", "Most upgraded connections open at once (LOOMGATE_MAX_UPGRADED), 0 when unbounded.", float64(cfg.MaxUpgraded), nil),
		m.upgradedLife,
		upgradedBytes("from_client", func(u Upgraded) uint64 { return u.FromClient }),
		upgradedBytes("to_client", func(u Upgraded) uint64 { return u.ToClient }),
		constant("loomgate_mode_info", "The admission mode in force.", 1, prometheus.Labels{"mode": cfg.Mode}),
		constant("loomgate_build_info", "The running build.", 1, prometheus.Labels{"version": cfg.Version, "goversion": runtime.Version()}),
		newPeakCollector(m),
		newAdviceCollector(cfg.Advice),
		capacity,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	}
	dryRun := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "loomgate_dry_run_requests_total",
		Help: "In a dry run, what the configured policy would have done with each request; 0 without a dry run.",
	}, []string{"would"})
	m.dryRun = make(map[string]prometheus.Counter, len(DryRunDecisions))
	for _, d := range DryRunDecisions {
		m.dryRun[d] = dryRun.WithLabelValues(d)
	}
	m.dryRunWait = histogram("loomgate_dry_run_queue_wait_seconds", "In a dry run, how long each request would have waited for admission or rejection.")
	cs = append(cs, dryRun, m.dryRunWait)
	if cfg.RequestSeconds != nil {
		cs = append(cs, requestSecondsCollectors(cfg.RequestSeconds)...)
	}
	if len(cfg.LimitChangeReasons) > 0 {
		changes := prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loomgate_limit_changes_total",
			Help: "Changes of the adaptive limit, by reason.",
		}, []string{"reason"})
		m.limitChanges = make(map[string]prometheus.Counter, len(cfg.LimitChangeReasons))
		for _, r := range cfg.LimitChangeReasons {
			m.limitChanges[r] = changes.WithLabelValues(r)
		}
		cs = append(cs, changes)
	}
	if len(cfg.Levels) > 0 {
		cs = append(cs, m.levelCollectors()...)
	}
	if len(cfg.ProbeResults) > 0 {
		probes := prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loomgate_probes_total",
			Help: "Probes of the upstream (LOOMGATE_PROBE), by what they found: queueing (fewer admitted were served as much), not_queueing, inconclusive.",
		}, []string{"result"})
		m.probes = make(map[string]prometheus.Counter, len(cfg.ProbeResults))
		for _, r := range cfg.ProbeResults {
			m.probes[r] = probes.WithLabelValues(r)
		}
		cs = append(cs, probes)
	}
	for _, c := range cs {
		if err := cfg.Registerer.Register(c); err != nil {
			return nil, fmt.Errorf("metrics: %w", err)
		}
	}
	return m, nil
}

// DryRunDecision counts what the policy would have done with one request
// (one of DryRunDecisions) and how long it would have waited.
func (m *Metrics) DryRunDecision(would string, wait time.Duration) {
	if c, ok := m.dryRun[would]; ok {
		c.Inc()
		m.dryRunWait.Observe(wait.Seconds())
	}
}

// LimitChanged counts one change of the adaptive limit; reasons outside
// Config.LimitChangeReasons are not counted.
func (m *Metrics) LimitChanged(reason string) {
	if c, ok := m.limitChanges[reason]; ok {
		c.Inc()
	}
}

// Probed counts one probe by its result; results outside
// Config.ProbeResults are not counted.
func (m *Metrics) Probed(result string) {
	if c, ok := m.probes[result]; ok {
		c.Inc()
	}
}

// RecordUpgraded adds the life of one upgraded connection that closed.
func (m *Metrics) RecordUpgraded(life time.Duration) {
	m.upgradedLife.Observe(life.Seconds())
}

// Record adds one finished request. It does not allocate.
func (m *Metrics) Record(o *outcome.Record) {
	if o.Kind < outcome.NumKinds {
		m.requests[o.Kind].Inc()
	}
	if class := o.UpstreamStatus / 100; class >= 1 && class <= 5 {
		m.upstreamClasses[class-1].Inc()
	}
	if o.Admission {
		m.queueWait.Observe(o.Queue.Seconds())
	}
	if o.Admitted {
		m.service.Observe(o.Service.Seconds())
	}
	m.total.Observe(o.Total.Seconds())
	if lv := int(o.Level); lv < len(m.levelRequests) {
		if o.Kind < outcome.NumKinds {
			m.levelRequests[lv][o.Kind].Inc()
		}
		if o.Admission {
			m.levelWait[lv].Observe(o.Queue.Seconds())
		}
	}
}

// levelCollectors are the per-level series: requests by outcome, queue
// wait, in flight and waiting. Every level's series exist from the start,
// so that an alert on critical's queue wait has data before it waits.
func (m *Metrics) levelCollectors() []prometheus.Collector {
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "loomgate_level_requests_total",
		Help: "Requests finished, by priority level (LOOMGATE_PRIORITIES) and outcome.",
	}, []string{"level", "outcome"})
	wait := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "loomgate_level_queue_wait_seconds",
		Help:    "Time from the request being read to its admission or rejection, by priority level.",
		Buckets: Buckets,
	}, []string{"level"})
	m.levelRequests = make([][outcome.NumKinds]prometheus.Counter, len(m.cfg.Levels))
	m.levelWait = make([]prometheus.Observer, len(m.cfg.Levels))
	for i, name := range m.cfg.Levels {
		for _, k := range outcome.Kinds() {
			m.levelRequests[i][k] = requests.WithLabelValues(name, k.String())
		}
		m.levelWait[i] = wait.WithLabelValues(name)
	}
	return []prometheus.Collector{requests, wait, &levelCollector{
		names: m.cfg.Levels, state: m.cfg.LevelState,
		inFlight: prometheus.NewDesc("loomgate_level_in_flight", "Requests admitted and not finished, by priority level.", []string{"level"}, nil),
		queued:   prometheus.NewDesc("loomgate_level_queued", "Requests waiting for admission, by priority level.", []string{"level"}, nil),
	}}
}

// levelCollector exports each level's requests in flight and waiting,
// read together at each scrape.
type levelCollector struct {
	names            []string
	state            func() []LevelState
	inFlight, queued *prometheus.Desc
}

func (c *levelCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.inFlight
	ch <- c.queued
}

func (c *levelCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.state()
	for i, name := range c.names {
		var s LevelState
		if i < len(st) {
			s = st[i]
		}
		ch <- prometheus.MustNewConstMetric(c.inFlight, prometheus.GaugeValue, float64(s.InFlight), name)
		ch <- prometheus.MustNewConstMetric(c.queued, prometheus.GaugeValue, float64(s.Queued), name)
	}
}

// peakCollector exports the high-water marks of the last PeakWindow. A
// gauge scraped every 15 s misses a burst that fills the queue for 2 s; its
// peak does not, whoever else scrapes.
type peakCollector struct {
	m                          *Metrics
	inFlight, queued, bytesMax *prometheus.Desc
}

func newPeakCollector(m *Metrics) *peakCollector {
	return &peakCollector{
		m:        m,
		inFlight: prometheus.NewDesc("loomgate_in_flight_max", "Highest loomgate_in_flight in the last minute.", nil, nil),
		queued:   prometheus.NewDesc("loomgate_queued_max", "Highest loomgate_queued in the last minute.", nil, nil),
		bytesMax: prometheus.NewDesc("loomgate_in_flight_bytes_max", "Highest loomgate_in_flight_bytes in the last minute.", nil, nil),
	}
}

func (c *peakCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.inFlight
	ch <- c.queued
	ch <- c.bytesMax
}

func (c *peakCollector) Collect(ch chan<- prometheus.Metric) {
	inFlight, queued, bytes := c.m.peaks.max(time.Now())
	gauge := func(d *prometheus.Desc, v int64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v))
	}
	gauge(c.inFlight, inFlight)
	gauge(c.queued, queued)
	gauge(c.bytesMax, bytes)
}
