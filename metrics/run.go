package metrics

import (
	"context"
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Run folds the limiter's peaks into the high-water gauges' slots every
// SampleInterval until ctx ends, so that a peak is kept for the moment it
// happened rather than the next scrape's. Without Run a scrape still folds
// them in, at its own moment.
func (m *Metrics) Run(ctx context.Context) {
	t := time.NewTicker(m.cfg.SampleInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			m.peaks.fold(now)
		}
	}
}

// Advice is what the advice estimates and predicts, as numbers to export.
// The metrics package does not compute it; Config.Advice supplies it.
type Advice struct {
	// Capacity is the upstream's estimated capacity, NaN when unknown;
	// LowerBound what it was seen to serve without its service time
	// growing.
	Capacity, LowerBound float64
	// Saturated is whether the upstream queues inside, nil when that is
	// unknown.
	Saturated *bool
	// Workers and Bulkhead are the recommended settings, 0 for none.
	Workers, Bulkhead int
	// UpstreamMemoryBytes and BytesPerRequest are the upstream's memory
	// and its slope per request in flight, 0 when unknown.
	UpstreamMemoryBytes, BytesPerRequest float64
	// ScrapeErrors counts failed reads of the upstream's metrics.
	ScrapeErrors int64
	// Routes are the route classes' own estimates.
	Routes []RouteAdvice
	// Predictions are what each alternative setting would do.
	Predictions []PredictionAdvice
}

// RouteAdvice is one route class's estimate. Name comes from a bounded set
// of classes, so that it can be a label.
type RouteAdvice struct {
	Name                string
	Saturated           bool
	Capacity, Stretch   float64
	Throughput          float64
	MeanServiceSeconds  float64
	BaselineSecondsP25  float64
	ServiceSecondsP25   float64
	ServiceSecondsP99   float64
	UnloadedMeanSeconds float64
}

// PredictionAdvice is one predicted setting. Setting is one of a fixed
// set: "in_force", "recommended", "other_mode", "memory_budget".
type PredictionAdvice struct {
	Setting                              string
	Throughput, P50, P99, Queue, Rejects float64 // rps and seconds
}

// adviceCollector exports the estimates and the advice, computed once per
// scrape from the same figures /advice shows.
type adviceCollector struct {
	advice                                      func() Advice
	capacity, lowerBound, saturated             *prometheus.Desc
	workers, bulkhead, memory, bytesPerRequest  *prometheus.Desc
	scrapeErrors                                *prometheus.Desc
	routeSaturated, routeCapacity, routeStretch *prometheus.Desc
	predThroughput, predP50, predP99, predQueue *prometheus.Desc
	pRej                                        *prometheus.Desc
}

func newAdviceCollector(advice func() Advice) *adviceCollector {
	d := prometheus.NewDesc
	return &adviceCollector{
		advice:          advice,
		capacity:        d("loomgate_upstream_capacity_estimate", "Concurrency beyond which the upstream's throughput stops growing: what it served at once, in unloaded service times, while it queued inside, over the last 15 minutes. NaN when unknown.", nil, nil),
		lowerBound:      d("loomgate_upstream_capacity_lower_bound", "Most requests the upstream was seen to hold without its service time growing, over the last 15 minutes.", nil, nil),
		saturated:       d("loomgate_upstream_saturated", "1 when the upstream queues inside for every route: service times grew with the load it holds while throughput stopped; 0 when it does not; NaN when unknown, for want of a calmer load than now.", nil, nil),
		workers:         d("loomgate_advice_workers", "Recommended LOOMGATE_WORKERS, 0 when the advice names none.", nil, nil),
		bulkhead:        d("loomgate_advice_bulkhead", "Recommended LOOMGATE_BULKHEAD, 0 when the advice names none.", nil, nil),
		memory:          d("loomgate_upstream_memory_bytes", "The upstream's memory at its last scrape (LOOMGATE_UPSTREAM_MEMORY_METRIC), 0 when not read.", nil, nil),
		bytesPerRequest: d("loomgate_advice_bytes_per_request", "Slope of the upstream's memory against requests in flight, 0 until load has varied enough to fit it.", nil, nil),
		scrapeErrors:    d("loomgate_upstream_scrape_errors_total", "Failed reads of the upstream's memory at LOOMGATE_UPSTREAM_METRICS_URL.", nil, nil),
		routeSaturated:  d("loomgate_route_saturated", "1 when the route queues inside the upstream.", []string{"route"}, nil),
		routeCapacity:   d("loomgate_route_capacity_estimate", "Concurrency the route sustains while it queues inside, NaN when unknown.", []string{"route"}, nil),
		routeStretch:    d("loomgate_route_service_stretch", "The route's first quartile of service time over its unloaded one.", []string{"route"}, nil),
		predThroughput:  d("loomgate_advice_predicted_throughput", "Predicted answers per second under each setting, for the measured demand.", []string{"setting"}, nil),
		predP50:         d("loomgate_advice_predicted_latency_p50_seconds", "Predicted median client latency under each setting.", []string{"setting"}, nil),
		predP99:         d("loomgate_advice_predicted_latency_p99_seconds", "Predicted 99th percentile of client latency under each setting.", []string{"setting"}, nil),
		predQueue:       d("loomgate_advice_predicted_queue_wait_seconds", "Predicted mean wait in loomgate's queue under each setting.", []string{"setting"}, nil),
		pRej:            d("loomgate_advice_predicted_rejections", "Predicted rejections per second under each setting.", []string{"setting"}, nil),
	}
}

func (c *adviceCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.capacity, c.lowerBound, c.saturated, c.workers, c.bulkhead, c.memory, c.bytesPerRequest,
		c.scrapeErrors, c.routeSaturated, c.routeCapacity, c.routeStretch, c.predThroughput, c.predP50, c.predP99, c.predQueue, c.pRej} {
		ch <- d
	}
}

func (c *adviceCollector) Collect(ch chan<- prometheus.Metric) {
	a := c.advice()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	gauge(c.capacity, a.Capacity)
	gauge(c.lowerBound, a.LowerBound)
	saturated := math.NaN()
	if a.Saturated != nil {
		saturated = boolValue(*a.Saturated)
	}
	gauge(c.saturated, saturated)
	gauge(c.workers, float64(a.Workers))
	gauge(c.bulkhead, float64(a.Bulkhead))
	gauge(c.memory, a.UpstreamMemoryBytes)
	gauge(c.bytesPerRequest, a.BytesPerRequest)
	ch <- prometheus.MustNewConstMetric(c.scrapeErrors, prometheus.CounterValue, float64(a.ScrapeErrors))
	for _, r := range a.Routes {
		gauge(c.routeSaturated, boolValue(r.Saturated), r.Name)
		gauge(c.routeCapacity, r.Capacity, r.Name)
		gauge(c.routeStretch, r.Stretch, r.Name)
	}
	for _, p := range a.Predictions {
		gauge(c.predThroughput, p.Throughput, p.Setting)
		gauge(c.predP50, p.P50, p.Setting)
		gauge(c.predP99, p.P99, p.Setting)
		gauge(c.predQueue, p.Queue, p.Setting)
		gauge(c.pRej, p.Rejects, p.Setting)
	}
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// noAdvice is Config.Advice's stand-in when there is none: nothing known.
func noAdvice() Advice { return Advice{Capacity: math.NaN()} }
