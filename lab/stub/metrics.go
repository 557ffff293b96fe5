package stub

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"
)

// metricsHandler builds the stub's own registry and the /metrics handler
// over it. The registry is the stub's alone so that a stub and a sidecar in
// one process never collide on a name.
func (s *Server) metricsHandler() fasthttp.RequestHandler {
	reg := prometheus.NewRegistry()
	s.reg = reg
	reg.MustRegister(
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		collectors.NewGoCollector(),
	)

	requests := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "loomgate_stub_requests_total",
		Help: "Requests served by the stub, by endpoint; other counts unknown paths.",
	}, []string{"path"})
	reg.MustRegister(requests)
	for r, label := range routeLabels {
		if label != "" {
			s.requests[r] = requests.WithLabelValues(label)
		}
	}

	gauge := func(name, help string, v *atomic.Int64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help},
			func() float64 { return float64(v.Load()) })
	}
	constant := func(name, help string, v int) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help},
			func() float64 { return float64(v) })
	}
	reg.MustRegister(
		gauge("loomgate_stub_in_flight", "Requests being served or waiting for a pool, /metrics excepted.", &s.inFlight),
		gauge("loomgate_stub_mem_held_bytes", "Bytes held by /mem requests in flight.", &s.memHeld),
		constant("loomgate_stub_db_connections", "Size of the /db connection pool.", s.dbSize),
		gauge("loomgate_stub_db_in_use", "/db connections held.", &s.dbOcc.inUse),
		gauge("loomgate_stub_db_waiting", "/db requests waiting for a connection.", &s.dbOcc.waiting),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "loomgate_stub_pool_size", Help: "Size of the hidden worker pool now, 0 when there is none."},
			func() float64 {
				if s.pool == nil {
					return 0
				}
				return float64(s.pool.Size())
			}),
		gauge("loomgate_stub_pool_in_use", "Workers of the hidden pool serving a request.", &s.poolOcc.inUse),
		gauge("loomgate_stub_pool_waiting", "Requests waiting for a worker of the hidden pool.", &s.poolOcc.waiting),
	)

	return fasthttpadaptor.NewFastHTTPHandler(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
}
