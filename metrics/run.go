package metrics

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// maxScrapeBytes bounds what is read of the upstream's metrics page: a
// large JVM exposes some hundreds of KiB.
const maxScrapeBytes = 16 << 20

// scrapeTimeout bounds one read of the upstream's metrics: a page that
// takes longer is not worth waiting for every five seconds.
const scrapeTimeout = 3 * time.Second

// Run samples the admission state every SampleInterval for the window's
// time averages and the high-water gauges and, with an UpstreamMetricsURL, reads the upstream's
// memory every ScrapeInterval, until ctx ends. Without Run the window has
// no in-flight or queued averages, and so no saturation verdict.
//
// The state is sampled rather than integrated at each change so that the
// admission path stays free of clocks and locks; a few samples per service
// time estimate the time average without bias, and its error is small
// beside the thresholds it is compared with.
func (m *Metrics) Run(ctx context.Context) {
	var wg sync.WaitGroup
	if m.cfg.UpstreamMetricsURL != "" {
		wg.Go(func() { m.scrapeLoop(ctx) })
	}
	t := time.NewTicker(m.cfg.SampleInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			wg.Wait()
			return
		case now := <-t.C:
			st := m.cfg.State()
			m.window.sample(now, st.InFlight, st.Queued)
			m.peaks.fold(now)
		}
	}
}

func (m *Metrics) scrapeLoop(ctx context.Context) {
	t := time.NewTicker(m.cfg.ScrapeInterval)
	defer t.Stop()
	var failures int
	var lastLog time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		v, err := m.scrapeMemory(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			m.scrapeErrors.Inc()
			failures++
			// An upstream without metrics would otherwise log every 5 s
			// forever; the counter has every failure.
			if now := time.Now(); now.Sub(lastLog) >= time.Minute {
				m.cfg.Logger.Debug("cannot read the upstream's memory; check LOOMGATE_UPSTREAM_METRICS_URL and LOOMGATE_UPSTREAM_MEMORY_METRIC",
					"url", m.cfg.UpstreamMetricsURL, "metric", m.cfg.UpstreamMemoryMetric.String(), "failures", failures, "err", err)
				lastLog, failures = now, 0
			}
			continue
		}
		m.window.memoryReading(time.Now(), v)
	}
}

// errNoSeries: the page was read but nothing matched the selector.
var errNoSeries = errors.New("no series matches")

// scrapeMemory reads the upstream's metrics page once and sums the selected
// series.
func (m *Metrics) scrapeMemory(ctx context.Context) (float64, error) {
	// Bounded inside the interval, so that a hung endpoint never stacks
	// scrapes up.
	ctx, cancel := context.WithTimeout(ctx, min(m.cfg.ScrapeInterval, scrapeTimeout))
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.cfg.UpstreamMetricsURL, nil)
	if err != nil {
		return 0, err
	}
	// The classic text format: every client library serves it, and it is
	// the one expfmt parses without negotiation.
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := m.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("status %s", resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(io.LimitReader(resp.Body, maxScrapeBytes))
	if err != nil {
		return 0, err
	}
	v, n := m.cfg.UpstreamMemoryMetric.Sum(families)
	if n == 0 {
		return 0, fmt.Errorf("%w %s", errNoSeries, m.cfg.UpstreamMemoryMetric)
	}
	return v, nil
}

// Snapshot returns the window's figures, history and advice now.
func (m *Metrics) Snapshot() Snapshot {
	now := time.Now()
	f := m.window.figures(now)
	return Snapshot{
		Time:           now,
		Settings:       m.settings,
		Figures:        f,
		History:        m.window.history(now),
		Recommendation: Advise(m.settings, f),
	}
}

// MeanService is the window's mean service time, 0 before any request was
// served: what RetryAfter needs, computed without the rest of the figures.
func (m *Metrics) MeanService() time.Duration {
	return m.window.meanService(time.Now())
}

// adviceCollector exports the estimates and the advice, computed once per
// scrape from the same figures /advice shows.
type adviceCollector struct {
	m                                      *Metrics
	capacity, saturated, workers, bulkhead *prometheus.Desc
	memory, bytesPerRequest                *prometheus.Desc
}

func newAdviceCollector(m *Metrics) *adviceCollector {
	return &adviceCollector{
		m:               m,
		capacity:        prometheus.NewDesc("loomgate_upstream_capacity_estimate", "Concurrency the upstream sustains: throughput x unloaded service time over the last minute; 0 until known.", nil, nil),
		saturated:       prometheus.NewDesc("loomgate_upstream_saturated", "1 when the upstream holds well above its capacity and its service time has grown: it queues internally.", nil, nil),
		workers:         prometheus.NewDesc("loomgate_advice_workers", "Recommended LOOMGATE_WORKERS, 0 when the advice names none.", nil, nil),
		bulkhead:        prometheus.NewDesc("loomgate_advice_bulkhead", "Recommended LOOMGATE_BULKHEAD, 0 when the advice names none.", nil, nil),
		memory:          prometheus.NewDesc("loomgate_upstream_memory_bytes", "The upstream's memory at its last scrape (LOOMGATE_UPSTREAM_MEMORY_METRIC), 0 when not read.", nil, nil),
		bytesPerRequest: prometheus.NewDesc("loomgate_advice_bytes_per_request", "Slope of the upstream's memory against requests in flight, 0 until load has varied enough to fit it.", nil, nil),
	}
}

func (c *adviceCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.capacity
	ch <- c.saturated
	ch <- c.workers
	ch <- c.bulkhead
	ch <- c.memory
	ch <- c.bytesPerRequest
}

func (c *adviceCollector) Collect(ch chan<- prometheus.Metric) {
	f := c.m.window.figures(time.Now())
	r := Advise(c.m.settings, f)
	saturated := 0.0
	if f.Saturated {
		saturated = 1
	}
	gauge := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v)
	}
	gauge(c.capacity, f.Capacity)
	gauge(c.saturated, saturated)
	gauge(c.workers, float64(r.Workers))
	gauge(c.bulkhead, float64(r.Bulkhead))
	gauge(c.memory, f.UpstreamMemoryBytes)
	gauge(c.bytesPerRequest, f.BytesPerRequest)
}
