package metrics

import (
	"math"

	"github.com/prometheus/client_golang/prometheus"
)

// The signal an autoscaler reads. A gauge of requests in flight is a
// sample of one instant per scrape: traffic that comes and goes between
// two scrapes never shows, and an autoscaler reading it provisions for the
// quiet moments. loomgate_in_flight_seconds_total and
// loomgate_queued_seconds_total are counters of request-seconds, the exact
// time-integrals of the two gauges, so that
//
//	rate(loomgate_in_flight_seconds_total[1m]) + rate(loomgate_queued_seconds_total[1m])
//
// is the mean number of requests present (served or waiting) over the
// minute, every burst included. loomgate_capacity is the concurrency the
// replica is sized for, and their ratio is its utilisation:
//
//	(rate(loomgate_in_flight_seconds_total[1m]) + rate(loomgate_queued_seconds_total[1m]))
//	  / loomgate_capacity
//
// Below 1 the replica has spare permits; above 1 requests wait for them.

// capacityCollector exports loomgate_capacity: the limit in force in the
// fixed and adaptive modes, and otherwise (unbounded mode, or adaptive
// before its first limit) the upstream's estimated capacity when known.
// When neither is known the series is absent rather than NaN, so that a
// utilisation computed from it is absent too instead of NaN.
type capacityCollector struct {
	cfg  Config
	desc *prometheus.Desc
}

func newCapacityCollector(cfg Config) *capacityCollector {
	return &capacityCollector{cfg: cfg, desc: prometheus.NewDesc("loomgate_capacity",
		"Concurrency this replica is sized for, the denominator of its utilisation: the limit in force in fixed and adaptive mode, the upstream's estimated capacity in unbounded mode (or adaptive before its first limit); absent when unknown.",
		nil, nil)}
}

func (c *capacityCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *capacityCollector) Collect(ch chan<- prometheus.Metric) {
	if v, ok := Capacity(c.cfg.Mode, c.cfg.State().Limit, c.cfg.Advice); ok {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, v)
	}
}

// Capacity is the concurrency a replica is sized for in mode ("fixed",
// "adaptive", "unbounded"), given the limit in force (0 for none) and the
// advice, which it reads only when the limit does not apply. It reports
// false when neither is known.
func Capacity(mode string, limit int64, advice func() Advice) (float64, bool) {
	if mode != "unbounded" && limit > 0 {
		return float64(limit), true
	}
	if advice == nil {
		return 0, false
	}
	if c := advice().Capacity; c > 0 && !math.IsInf(c, 0) && !math.IsNaN(c) {
		return c, true
	}
	return 0, false
}

// requestSecondsCollectors are the two counters of request-seconds, read
// from cfg.RequestSeconds at each scrape.
func requestSecondsCollectors(f func() (inFlight, queued float64)) []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "loomgate_in_flight_seconds_total",
			Help: "Time-integral of loomgate_in_flight in request-seconds, updated at every admission and release: its rate is the mean concurrency over the range, bursts between scrapes included.",
		}, func() float64 { v, _ := f(); return v }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "loomgate_queued_seconds_total",
			Help: "Time-integral of loomgate_queued in request-seconds, updated at every change of the queue: its rate is the mean queue depth over the range.",
		}, func() float64 { _, q := f(); return q }),
	}
}
