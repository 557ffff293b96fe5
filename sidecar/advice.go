package sidecar

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/loomgate/loomgate/limiter"
	"github.com/loomgate/loomgate/metrics"
	"github.com/loomgate/loomgate/proxy"
)

// AdviceDoc is the JSON of GET /advice. Its field names are a contract for
// scripts: durations are in seconds and sizes in bytes, as in the metrics.
type AdviceDoc struct {
	Time           time.Time         `json:"time"`
	Version        string            `json:"version"`
	Live           LiveDoc           `json:"live"`
	Settings       SettingsDoc       `json:"settings"`
	Figures        FiguresDoc        `json:"figures"`
	Recommendation RecommendationDoc `json:"recommendation"`
	History        []BucketDoc       `json:"history"`
}

// LiveDoc is admission at this instant, where figures are window averages.
type LiveDoc struct {
	InFlight      int64 `json:"in_flight"`
	Queued        int64 `json:"queued"`
	InFlightBytes int64 `json:"in_flight_bytes"`
}

// SettingsDoc is the admission configuration: the mode in force and both
// modes' settings, so that what a flip of the mode would bring is in view.
// Inactive names the variables of the other mode.
type SettingsDoc struct {
	Mode                string   `json:"mode"`
	Inactive            []string `json:"inactive"`
	Workers             int      `json:"workers"`
	QueueSize           int      `json:"queue_size"`
	QueueTimeoutSeconds float64  `json:"queue_timeout_seconds"`
	Bulkhead            int      `json:"bulkhead"`
	BulkheadWaitSeconds float64  `json:"bulkhead_wait_seconds"`
	MaxInflightBytes    int64    `json:"max_inflight_bytes"`
	MemoryBudgetBytes   int64    `json:"memory_budget_bytes"`
}

// FiguresDoc is metrics.Figures in the units of the metrics.
type FiguresDoc struct {
	WindowSeconds          float64 `json:"window_seconds"`
	Requests               int64   `json:"requests"`
	Rejected               int64   `json:"rejected"`
	ArrivalRate            float64 `json:"arrival_rate_rps"`
	Throughput             float64 `json:"throughput_rps"`
	InFlight               float64 `json:"in_flight"`
	Queued                 float64 `json:"queued"`
	MeanQueueSeconds       float64 `json:"mean_queue_seconds"`
	QueueP50Seconds        float64 `json:"queue_p50_seconds"`
	QueueP99Seconds        float64 `json:"queue_p99_seconds"`
	MeanServiceSeconds     float64 `json:"mean_service_seconds"`
	ServiceP50Seconds      float64 `json:"service_p50_seconds"`
	ServiceP99Seconds      float64 `json:"service_p99_seconds"`
	UnloadedServiceSeconds float64 `json:"unloaded_service_seconds"`
	QueueShare             float64 `json:"queue_share"`
	UpstreamCapacity       float64 `json:"upstream_capacity"`
	UpstreamSaturated      bool    `json:"upstream_saturated"`
	UpstreamMemoryBytes    float64 `json:"upstream_memory_bytes"`
	BytesPerRequest        float64 `json:"bytes_per_request"`
}

type RecommendationDoc struct {
	Mode      string   `json:"mode"`
	Workers   int      `json:"workers"`
	QueueSize int      `json:"queue_size"`
	Bulkhead  int      `json:"bulkhead"`
	Summary   string   `json:"summary"`
	Reasons   []string `json:"reasons"`
}

// BucketDoc is one BucketWidth of the window, oldest first.
type BucketDoc struct {
	Start              time.Time `json:"start"`
	Seconds            float64   `json:"seconds"`
	Throughput         float64   `json:"throughput_rps"`
	MeanQueueSeconds   float64   `json:"mean_queue_seconds"`
	MeanServiceSeconds float64   `json:"mean_service_seconds"`
	InFlight           float64   `json:"in_flight"`
	Queued             float64   `json:"queued"`
}

func (s *Sidecar) advice(snap metrics.Snapshot) AdviceDoc {
	f, r := snap.Figures, snap.Recommendation
	st := s.limiter.Stats()
	doc := AdviceDoc{
		Time:    snap.Time,
		Version: s.version,
		Live:    LiveDoc{InFlight: st.InFlight, Queued: st.Queued, InFlightBytes: st.Bytes},
		Settings: SettingsDoc{
			Mode:     s.cfg.Mode.String(),
			Inactive: InactiveVariables(s.cfg.Mode),
			Workers:  s.cfg.Workers, QueueSize: s.cfg.QueueSize, QueueTimeoutSeconds: s.cfg.QueueTimeout.Seconds(),
			Bulkhead: s.cfg.Bulkhead, BulkheadWaitSeconds: s.cfg.BulkheadWait.Seconds(),
			MaxInflightBytes:  int64(s.cfg.MaxInflightBytes),
			MemoryBudgetBytes: int64(s.cfg.MemoryBudgetBytes),
		},
		Figures: FiguresDoc{
			WindowSeconds:          f.Span.Seconds(),
			Requests:               f.Requests,
			Rejected:               f.Rejected,
			ArrivalRate:            f.ArrivalRate,
			Throughput:             f.Throughput,
			InFlight:               f.InFlight,
			Queued:                 f.Queued,
			MeanQueueSeconds:       f.MeanQueue.Seconds(),
			QueueP50Seconds:        f.QueueP50.Seconds(),
			QueueP99Seconds:        f.QueueP99.Seconds(),
			MeanServiceSeconds:     f.MeanService.Seconds(),
			ServiceP50Seconds:      f.ServiceP50.Seconds(),
			ServiceP99Seconds:      f.ServiceP99.Seconds(),
			UnloadedServiceSeconds: f.UnloadedService.Seconds(),
			QueueShare:             f.QueueShare,
			UpstreamCapacity:       f.Capacity,
			UpstreamSaturated:      f.Saturated,
			UpstreamMemoryBytes:    f.UpstreamMemoryBytes,
			BytesPerRequest:        f.BytesPerRequest,
		},
		Recommendation: RecommendationDoc{
			Mode: r.Mode, Workers: r.Workers, QueueSize: r.QueueSize, Bulkhead: r.Bulkhead,
			Summary: r.Summary, Reasons: r.Reasons,
		},
		History: make([]BucketDoc, 0, len(snap.History)),
	}
	if doc.Recommendation.Reasons == nil {
		doc.Recommendation.Reasons = []string{}
	}
	for _, b := range snap.History {
		doc.History = append(doc.History, BucketDoc{
			Start: b.Start, Seconds: b.Span.Seconds(), Throughput: b.Throughput,
			MeanQueueSeconds: b.MeanQueue.Seconds(), MeanServiceSeconds: b.MeanService.Seconds(),
			InFlight: b.InFlight, Queued: b.Queued,
		})
	}
	return doc
}

// serveAdvice is GET /advice: JSON, or plain sentences with ?format=text.
func (s *Sidecar) serveAdvice(w http.ResponseWriter, r *http.Request) {
	format := r.URL.Query().Get("format")
	if format != "" && format != "json" && format != "text" {
		http.Error(w, "format must be json or text", http.StatusBadRequest)
		return
	}
	snap := s.metrics.Snapshot()
	w.Header().Set("Cache-Control", "no-store")
	if format == "text" {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Write([]byte(snap.Text()))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(s.advice(snap))
}

// retryAfter is the proxy's RetryAfter: the expected wait of a rejected
// client from the live state, by metrics.RetryAfter's formula.
//
//   - queue full: a retry would stand behind everyone queued, at queued+1;
//   - queue timeout: behind the queue it leaves, at its length;
//   - bulkhead full: at the bulkhead's waiters + 1, at most BULKHEAD_WAIT
//     (at least 1 s, when it is 0 and rejection is immediate);
//   - memory full: memory is freed as any request in flight finishes, so
//     the wait is one service time shared by all in flight.
//
// The ceiling is the longest the retry could itself wait before rejection:
// QUEUE_TIMEOUT in fixed mode, BULKHEAD_WAIT in unbounded mode.
func (s *Sidecar) retryAfter(kind proxy.Kind) time.Duration {
	st := s.limiter.Stats()
	service := s.metrics.MeanService()
	ceiling := s.cfg.BulkheadWait
	if s.cfg.Mode == limiter.Fixed {
		ceiling = s.cfg.QueueTimeout
	}
	switch kind {
	case proxy.RejectedQueueFull, proxy.RejectedBulkhead:
		return metrics.RetryAfter(st.Queued+1, st.Limit, service, ceiling)
	case proxy.RejectedQueueTimeout:
		return metrics.RetryAfter(st.Queued, st.Limit, service, ceiling)
	case proxy.RejectedMemory:
		return metrics.RetryAfter(1, int(st.InFlight), service, ceiling)
	}
	return time.Second
}
