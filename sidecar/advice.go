package sidecar

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/loomgate/loomgate/advice"
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
	// Adaptive is the adaptive limit and its last changes; absent in the
	// other modes.
	Adaptive *AdaptiveDoc `json:"adaptive,omitempty"`
	// Probe is the probe of the upstream (LOOMGATE_PROBE) and its last
	// report; absent when it is off.
	Probe *ProbeDoc `json:"probe,omitempty"`
	// Upstream is whether the upstream answers, now.
	Upstream UpstreamDoc `json:"upstream"`
	// Levels is what priorities did to each level over the last minute,
	// highest first, the levels with requests only; absent without
	// LOOMGATE_PRIORITIES and its kin.
	Levels []LevelDoc `json:"levels,omitempty"`
}

// LevelDoc is one priority level's last minute.
type LevelDoc struct {
	Level string `json:"level"`
	// Requests met admission; Answered were served; Rejected were refused
	// or shed with a 503.
	Requests int `json:"requests"`
	Answered int `json:"answered"`
	Rejected int `json:"rejected"`
	// Throughput is answers a second.
	Throughput float64 `json:"throughput_rps"`
	// LatencyP99Seconds is of the answered requests' queue wait and
	// service time together, QueueP99Seconds of every request's queue
	// wait; null when none.
	LatencyP99Seconds *float64 `json:"latency_p99_seconds"`
	QueueP99Seconds   *float64 `json:"queue_p99_seconds"`
	// RejectedShare is Rejected over Requests.
	RejectedShare float64 `json:"rejected_share"`
	// Summary is the level in a phrase: "critical: 196 rps, p99 52ms".
	Summary string `json:"summary"`
}

// UpstreamDoc is whether the upstream answers. A failure spell runs from a
// request the upstream failed (upstream_error, or a connect that failed)
// to the next one it answers, or, when it failed only connects, to the
// next connect /readyz makes that succeeds.
type UpstreamDoc struct {
	URL string `json:"url"`
	// Failing is set during a failure spell; FailingSince is its first
	// failure (null outside one), Failed its requests, and Error the
	// last one's error ("" outside one).
	Failing      bool       `json:"failing"`
	FailingSince *time.Time `json:"failing_since"`
	Failed       int64      `json:"failed"`
	Error        string     `json:"error"`
	// NotReady is why /readyz fails on the upstream's account, from the
	// last connects and requests; "" when it passes, or before anything
	// was tried.
	NotReady string `json:"not_ready"`
	// ReadyFollowsSeconds is LOOMGATE_READY_FOLLOWS_UPSTREAM in seconds, 0
	// when /readyz does not follow the upstream.
	ReadyFollowsSeconds float64 `json:"ready_follows_upstream_seconds"`
}

// ProbeDoc is the probe and what it last found.
type ProbeDoc struct {
	// Probes counts the probes run; Active is set while one caps
	// admission.
	Probes int  `json:"probes"`
	Active bool `json:"active"`
	// Last is the last probe's report, null before the first.
	Last *ProbeReportDoc `json:"last"`
}

// ProbeReportDoc is one probe: the upstream before it, each cap it
// tried, and what it found.
type ProbeReportDoc struct {
	Start  time.Time `json:"start"`
	End    time.Time `json:"end"`
	Result string    `json:"result"`
	// Before the probe: requests in flight, answers a second, mean service.
	InFlight       float64 `json:"in_flight"`
	Throughput     float64 `json:"throughput_rps"`
	ServiceSeconds float64 `json:"mean_service_seconds"`
	// Capacity is what the upstream serves at once at its unloaded speed,
	// 0 when the probe was inconclusive.
	Capacity float64        `json:"capacity"`
	Steps    []ProbeStepDoc `json:"steps"`
	Detail   string         `json:"detail"`
}

// ProbeStepDoc is one cap of a probe, measured.
type ProbeStepDoc struct {
	Cap            int     `json:"cap"`
	InFlight       float64 `json:"in_flight"`
	Throughput     float64 `json:"throughput_rps"`
	ServiceSeconds float64 `json:"mean_service_seconds"`
	Held           bool    `json:"held"`
}

// AdaptiveDoc is the adaptive mode's limit and why it moved.
type AdaptiveDoc struct {
	// Limit is the limit in force, 0 while admission is open.
	Limit   int         `json:"limit"`
	Changes []ChangeDoc `json:"changes"`
}

// ChangeDoc is one change of the adaptive limit.
type ChangeDoc struct {
	Time   time.Time `json:"time"`
	From   int       `json:"from"`
	To     int       `json:"to"`
	Reason string    `json:"reason"`
	Detail string    `json:"detail"`
}

// LiveDoc is admission at this instant, where figures are window averages.
type LiveDoc struct {
	InFlight      int64 `json:"in_flight"`
	Queued        int64 `json:"queued"`
	InFlightBytes int64 `json:"in_flight_bytes"`
}

// SettingsDoc is the admission configuration: the mode in force and every
// mode's settings, so that what a flip of the mode would bring is in view.
// Inactive names the variables of the other modes.
type SettingsDoc struct {
	Mode string `json:"mode"`
	// DryRun is set when the mode only counts what it would do.
	DryRun              bool     `json:"dry_run"`
	Inactive            []string `json:"inactive"`
	Workers             int      `json:"workers"`
	QueueSize           int      `json:"queue_size"`
	QueueTimeoutSeconds float64  `json:"queue_timeout_seconds"`
	Bulkhead            int      `json:"bulkhead"`
	BulkheadWaitSeconds float64  `json:"bulkhead_wait_seconds"`
	MaxInFlightBytes    int64    `json:"max_inflight_bytes"`
	MemoryBudgetBytes   int64    `json:"memory_budget_bytes"`
}

// FiguresDoc is advice.Figures in the units of the metrics.
type FiguresDoc struct {
	WindowSeconds      float64 `json:"window_seconds"`
	Requests           int64   `json:"requests"`
	Rejected           int64   `json:"rejected"`
	UpstreamFailed     int64   `json:"upstream_failed"`
	ArrivalRate        float64 `json:"arrival_rate_rps"`
	Throughput         float64 `json:"throughput_rps"`
	InFlight           float64 `json:"in_flight"`
	Queued             float64 `json:"queued"`
	MeanQueueSeconds   float64 `json:"mean_queue_seconds"`
	QueueP50Seconds    float64 `json:"queue_p50_seconds"`
	QueueP99Seconds    float64 `json:"queue_p99_seconds"`
	MeanServiceSeconds float64 `json:"mean_service_seconds"`
	ServiceP50Seconds  float64 `json:"service_p50_seconds"`
	ServiceP99Seconds  float64 `json:"service_p99_seconds"`
	LatencyP50Seconds  float64 `json:"latency_p50_seconds"`
	LatencyP99Seconds  float64 `json:"latency_p99_seconds"`
	QueueShare         float64 `json:"queue_share"`
	// Demand is the clients outstanding now (in flight + queued, over the
	// last 10 s), what the predictions are made for.
	Demand float64 `json:"demand"`
	// DemandModel is "closed" (clients that wait for their answers) or
	// "open" (requests that arrive at OpenArrivalRate whatever the
	// latency): the predictions' model, for DemandModelReason.
	DemandModel       string  `json:"demand_model"`
	DemandModelReason string  `json:"demand_model_reason"`
	OpenArrivalRate   float64 `json:"open_arrival_rate_rps"`
	// UpstreamCapacity and its range are null when unknown; then
	// CapacityUnknown says why.
	UpstreamCapacity *float64 `json:"upstream_capacity"`
	CapacityLow      *float64 `json:"upstream_capacity_low"`
	CapacityHigh     *float64 `json:"upstream_capacity_high"`
	// CapacityAgeSeconds is how long ago the upstream last queued inside,
	// when the capacity is what held then; 0 while it queues now.
	CapacityAgeSeconds float64 `json:"upstream_capacity_age_seconds"`
	CapacityLowerBound float64 `json:"upstream_capacity_lower_bound"`
	// SeenConcurrency is the most the upstream was seen serving at once
	// while no route queued inside; beyond it, with the capacity unknown,
	// nothing is known.
	SeenConcurrency float64 `json:"upstream_seen_concurrency"`
	CapacityUnknown string  `json:"upstream_capacity_unknown,omitempty"`
	// CapacityAtMost is, when the capacity is unknown but the upstream
	// queues inside, the most it can be; null otherwise.
	CapacityAtMost *float64 `json:"upstream_capacity_at_most"`
	// UpstreamSaturated is null when it is unknown (the upstream was never
	// seen at a calmer load than now); SaturatedUnknown then says why.
	UpstreamSaturated    *bool    `json:"upstream_saturated"`
	SaturatedUnknown     string   `json:"upstream_saturated_unknown,omitempty"`
	SaturatedRoutesAlone []string `json:"saturated_routes_alone"`
	// SharedRoutes are the routes whose service times stretch together
	// when the upstream is saturated: they wait for one bottleneck.
	SharedRoutes        []string   `json:"shared_routes"`
	LoadVaried          bool       `json:"load_varied"`
	UpstreamMemoryBytes float64    `json:"upstream_memory_bytes"`
	BytesPerRequest     float64    `json:"bytes_per_request"`
	Routes              []RouteDoc `json:"routes"`
}

// RouteDoc is one route class's figures.
type RouteDoc struct {
	Name               string   `json:"name"`
	Requests           int64    `json:"requests"`
	Throughput         float64  `json:"throughput_rps"`
	InFlight           float64  `json:"in_flight"`
	MeanServiceSeconds float64  `json:"mean_service_seconds"`
	ServiceP25Seconds  float64  `json:"service_p25_seconds"`
	ServiceP50Seconds  float64  `json:"service_p50_seconds"`
	ServiceP99Seconds  float64  `json:"service_p99_seconds"`
	UnloadedSeconds    float64  `json:"unloaded_mean_seconds"`
	UnloadedP25Seconds float64  `json:"unloaded_p25_seconds"`
	Stretch            float64  `json:"stretch"`
	Saturated          bool     `json:"saturated"`
	SlowerWithoutLoad  bool     `json:"slower_without_more_load"`
	Capacity           *float64 `json:"capacity"`
}

// PredictionDoc is what one setting would do to the measured demand.
type PredictionDoc struct {
	Name             string  `json:"name"`
	Setting          string  `json:"setting"`
	Mode             string  `json:"mode"`
	Limit            int     `json:"limit"`
	QueueSize        int     `json:"queue_size"`
	WaitSeconds      float64 `json:"wait_seconds"`
	Throughput       float64 `json:"throughput_rps"`
	P50Seconds       float64 `json:"latency_p50_seconds"`
	P99Seconds       float64 `json:"latency_p99_seconds"`
	MeanQueueSeconds float64 `json:"mean_queue_seconds"`
	Rejected         float64 `json:"rejected_rps"`
	InFlight         float64 `json:"in_flight"`
	Queued           float64 `json:"queued"`
	InFlightBytes    float64 `json:"in_flight_bytes"`
	UpstreamMemBytes float64 `json:"upstream_in_flight_memory_bytes"`
	// BeyondSeen is set when the setting would put more at the upstream
	// than it was seen serving at once: the figures assume it serves no
	// more.
	BeyondSeen bool `json:"beyond_seen"`
	// Other is the other end of the setting's range, when what it does
	// depends on a capacity never seen (see docs/advice.md); null when the
	// prediction is one figure.
	Other *OutcomeDoc `json:"other_end"`
	// Course is how an open overload unfolds under the setting; null when
	// the demand is closed or the arrivals do not exceed what it serves.
	Course *CourseDoc `json:"course"`
	// For open demand: how many more requests wait each second, and when
	// the queue first rejected, 0 if not within the first minute.
	QueueGrowth      float64 `json:"queue_growth_rps"`
	FullAfterSeconds float64 `json:"queue_full_after_seconds"`
}

// CourseDoc is an open overload under one setting, from an empty queue.
type CourseDoc struct {
	// Excess is how much the arrivals exceed what the setting serves, as
	// a share of it; QueueGrowth how many more wait each second.
	Excess      float64 `json:"excess"`
	QueueGrowth float64 `json:"queue_growth_rps"`
	// Points are the requests arriving in the 5 s before each moment: their
	// median wait and latency, and the share rejected.
	Points []CoursePointDoc `json:"points"`
	// FullAfterSeconds is when waits reach the queue's timeout or it its
	// bound, and RejectedShare the share rejected from then on; 0 and 0
	// when nothing bounds the wait, 0 and above 0 when the excess is
	// rejected at once.
	FullAfterSeconds float64 `json:"full_after_seconds"`
	RejectedShare    float64 `json:"rejected_share"`
	// FullBy is what turns the excess away: "queue_timeout", "queue_size",
	// "bulkhead_wait", "at_once" (a bulkhead or a fixed mode with no queue
	// rejects it as it comes), or "" when nothing does.
	FullBy string `json:"full_by"`
}

// CoursePointDoc is one moment of a course.
type CoursePointDoc struct {
	AtSeconds      float64 `json:"at_seconds"`
	WaitSeconds    float64 `json:"wait_seconds"`
	LatencySeconds float64 `json:"latency_seconds"`
	RejectedShare  float64 `json:"rejected_share"`
}

// OutcomeDoc is one end of a predicted range.
type OutcomeDoc struct {
	Throughput float64 `json:"throughput_rps"`
	P50Seconds float64 `json:"latency_p50_seconds"`
	P99Seconds float64 `json:"latency_p99_seconds"`
}

type RecommendationDoc struct {
	Mode      string `json:"mode"`
	Workers   int    `json:"workers"`
	QueueSize int    `json:"queue_size"`
	Bulkhead  int    `json:"bulkhead"`
	Probe     int    `json:"probe"`
	// Limit is, in adaptive mode, where its limit should stand: the
	// upstream's capacity when it is saturated; 0 when none should.
	Limit       int             `json:"limit"`
	Summary     string          `json:"summary"`
	Reasons     []string        `json:"reasons"`
	Predictions []PredictionDoc `json:"predictions"`
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

// known is x, or nil when it is unknown (NaN): JSON has no NaN.
func known(x float64) *float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return nil
	}
	return &x
}

func (s *Sidecar) advice(snap advice.Snapshot) AdviceDoc {
	f, r, e := snap.Figures, snap.Recommendation, snap.Figures.Estimate
	st := s.Stats()
	doc := AdviceDoc{
		Time:    snap.Time,
		Version: s.version,
		Live:    LiveDoc{InFlight: st.InFlight, Queued: st.Queued, InFlightBytes: st.Bytes},
		Settings: SettingsDoc{
			Mode:     s.cfg.Mode.String(),
			DryRun:   s.cfg.DryRun,
			Inactive: InactiveVariables(s.cfg.Mode),
			Workers:  s.cfg.Workers, QueueSize: s.cfg.QueueSize, QueueTimeoutSeconds: s.cfg.QueueTimeout.Seconds(),
			Bulkhead: s.cfg.Bulkhead, BulkheadWaitSeconds: s.cfg.BulkheadWait.Seconds(),
			MaxInFlightBytes:  int64(s.cfg.MaxInFlightBytes),
			MemoryBudgetBytes: int64(s.cfg.MemoryBudgetBytes),
		},
		Figures: FiguresDoc{
			WindowSeconds:        f.Span.Seconds(),
			Requests:             f.Requests,
			Rejected:             f.Rejected,
			UpstreamFailed:       f.Failed,
			ArrivalRate:          f.ArrivalRate,
			Throughput:           f.Throughput,
			InFlight:             f.InFlight,
			Queued:               f.Queued,
			MeanQueueSeconds:     f.MeanQueue.Seconds(),
			QueueP50Seconds:      f.QueueP50.Seconds(),
			QueueP99Seconds:      f.QueueP99.Seconds(),
			MeanServiceSeconds:   f.MeanService.Seconds(),
			ServiceP50Seconds:    f.ServiceP50.Seconds(),
			ServiceP99Seconds:    f.ServiceP99.Seconds(),
			LatencyP50Seconds:    f.LatencyP50.Seconds(),
			LatencyP99Seconds:    f.LatencyP99.Seconds(),
			QueueShare:           f.QueueShare,
			Demand:               f.Demand,
			DemandModel:          demandModel(f.DemandOpen),
			DemandModelReason:    f.DemandWhy,
			OpenArrivalRate:      f.OpenRate,
			UpstreamCapacity:     known(e.Capacity),
			CapacityLow:          known(e.CapacityLow),
			CapacityHigh:         known(e.CapacityHigh),
			CapacityAgeSeconds:   e.CapacityAge.Seconds(),
			CapacityLowerBound:   e.LowerBound,
			SeenConcurrency:      e.Seen,
			CapacityUnknown:      e.Unknown,
			CapacityAtMost:       known(e.CapacityAtMost),
			UpstreamSaturated:    saturated(e),
			SaturatedUnknown:     e.SaturationUnknown,
			SaturatedRoutesAlone: append([]string{}, e.RouteLocal...),
			SharedRoutes:         append([]string{}, e.Shared...),
			LoadVaried:           e.LoadVaried,
			UpstreamMemoryBytes:  f.UpstreamMemoryBytes,
			BytesPerRequest:      f.BytesPerRequest,
			Routes:               []RouteDoc{},
		},
		Recommendation: RecommendationDoc{
			Mode: r.Mode.String(), Workers: r.Workers, QueueSize: r.QueueSize, Bulkhead: r.Bulkhead, Probe: r.Probe, Limit: r.Limit,
			Summary: r.Summary, Reasons: append([]string{}, r.Reasons...), Predictions: []PredictionDoc{},
		},
		History: make([]BucketDoc, 0, len(snap.History)),
	}
	for _, rt := range f.Routes {
		doc.Figures.Routes = append(doc.Figures.Routes, RouteDoc{
			Name: rt.Name, Requests: rt.Requests, Throughput: rt.Throughput, InFlight: rt.InFlight,
			MeanServiceSeconds: rt.MeanService.Seconds(), ServiceP25Seconds: rt.ServiceP25.Seconds(),
			ServiceP50Seconds: rt.ServiceP50.Seconds(), ServiceP99Seconds: rt.ServiceP99.Seconds(),
			UnloadedSeconds: rt.Baseline.Seconds(), UnloadedP25Seconds: rt.BaselineP25.Seconds(),
			Stretch: rt.Stretch, Saturated: rt.Saturated, SlowerWithoutLoad: rt.Slower, Capacity: known(rt.Capacity),
		})
	}
	for _, p := range r.Predictions {
		mode := "unbounded"
		switch {
		case p.Adaptive:
			mode = "adaptive"
		case p.Fixed:
			mode = "fixed"
		}
		var other *OutcomeDoc
		if o := p.Other; o != nil {
			other = &OutcomeDoc{Throughput: o.Throughput, P50Seconds: o.P50.Seconds(), P99Seconds: o.P99.Seconds()}
		}
		var course *CourseDoc
		if c := p.Course; c != nil {
			course = &CourseDoc{Excess: c.Excess, QueueGrowth: c.Growth, FullAfterSeconds: c.FullAfter.Seconds(), RejectedShare: c.Rejected, Points: []CoursePointDoc{}}
			switch {
			case c.FullAfter == 0 && c.Rejected > 0:
				course.FullBy = "at_once"
			case c.FullAfter > 0 && c.Bounded:
				course.FullBy = "queue_size"
			case c.FullAfter > 0 && p.Fixed:
				course.FullBy = "queue_timeout"
			case c.FullAfter > 0:
				course.FullBy = "bulkhead_wait"
			}
			for _, pt := range c.Points {
				course.Points = append(course.Points, CoursePointDoc{AtSeconds: pt.At.Seconds(), WaitSeconds: pt.Wait.Seconds(),
					LatencySeconds: pt.Latency.Seconds(), RejectedShare: pt.Rejected})
			}
		}
		doc.Recommendation.Predictions = append(doc.Recommendation.Predictions, PredictionDoc{
			Other: other, Course: course,
			Name: p.Name, Setting: p.Setting.Describe(), Mode: mode, Limit: p.Limit, QueueSize: p.QueueSize, WaitSeconds: p.Wait.Seconds(),
			Throughput: p.Throughput, P50Seconds: p.P50.Seconds(), P99Seconds: p.P99.Seconds(), MeanQueueSeconds: p.MeanQueue.Seconds(),
			Rejected: p.Rejected, InFlight: p.InFlight, Queued: p.Queued, InFlightBytes: p.InFlightBytes, UpstreamMemBytes: p.UpstreamBytes,
			BeyondSeen: p.Beyond, QueueGrowth: p.QueueGrowth, FullAfterSeconds: p.FullAfter.Seconds(),
		})
	}
	for _, b := range snap.History {
		doc.History = append(doc.History, BucketDoc{
			Start: b.Start, Seconds: b.Span.Seconds(), Throughput: b.Throughput,
			MeanQueueSeconds: b.MeanQueue.Seconds(), MeanServiceSeconds: b.MeanService.Seconds(),
			InFlight: b.InFlight, Queued: b.Queued,
		})
	}
	if s.probe != nil {
		doc.Probe = s.probeDoc()
	}
	if s.adaptive != nil {
		// The limit the snapshot was advised on (the shadow's, in a dry
		// run), and the changes up to it: the document's text, JSON and
		// page then say one limit, not the snapshot's in one place and a
		// later one in another.
		a := &AdaptiveDoc{Limit: snap.Settings.Workers, Changes: []ChangeDoc{}}
		for _, ch := range s.adaptive.Changes() {
			if ch.At.After(snap.Time) {
				continue
			}
			a.Changes = append(a.Changes, ChangeDoc{Time: ch.At, From: ch.From, To: ch.To, Reason: string(ch.Reason), Detail: ch.Detail})
		}
		doc.Adaptive = a
	}
	up := s.health.State()
	doc.Upstream = UpstreamDoc{
		URL: s.cfg.Upstream, Failing: !up.FailingSince.IsZero(), Failed: up.Failed, Error: up.Err,
		NotReady: up.NotReady, ReadyFollowsSeconds: s.cfg.ReadyFollowsUpstream.Seconds(),
	}
	if doc.Upstream.Failing {
		doc.Upstream.FailingSince = &up.FailingSince
	}
	if s.levels != nil {
		for _, lf := range s.levels.Figures(snap.Time) {
			doc.Levels = append(doc.Levels, LevelDoc{
				Level: lf.Name, Requests: lf.Requests, Answered: lf.Answered, Rejected: lf.Rejected,
				Throughput: lf.Throughput, LatencyP99Seconds: known(lf.LatencyP99), QueueP99Seconds: known(lf.QueueP99),
				RejectedShare: lf.RejectedShare, Summary: lf.Summary(),
			})
		}
	}
	return doc
}

// saturated is the estimate's verdict, nil when it is unknown.
func saturated(e advice.Estimate) *bool {
	if e.SaturationUnknown != "" {
		return nil
	}
	return &e.Saturated
}

func demandModel(open bool) string {
	if open {
		return "open"
	}
	return "closed"
}

// gauges turns the advice into the numbers metrics exports.
func (s *Sidecar) gauges() metrics.Advice {
	snap := s.advisor.Snapshot()
	f, r, e := snap.Figures, snap.Recommendation, snap.Figures.Estimate
	a := metrics.Advice{
		Capacity: e.Capacity, LowerBound: e.LowerBound, Saturated: saturated(e),
		Workers: r.Workers, Bulkhead: r.Bulkhead,
		UpstreamMemoryBytes: f.UpstreamMemoryBytes, BytesPerRequest: f.BytesPerRequest,
		ScrapeErrors: s.advisor.ScrapeErrors(),
	}
	for _, rt := range f.Routes {
		a.Routes = append(a.Routes, metrics.RouteAdvice{Name: rt.Name, Saturated: rt.Saturated, Capacity: rt.Capacity, Stretch: rt.Stretch})
	}
	for _, p := range r.Predictions {
		a.Predictions = append(a.Predictions, metrics.PredictionAdvice{
			Setting: predictionLabel(p.Name), Throughput: p.Throughput, P50: p.P50.Seconds(), P99: p.P99.Seconds(),
			Queue: p.MeanQueue.Seconds(), Rejects: p.Rejected,
		})
	}
	return a
}

// predictionLabel maps a prediction's name to the fixed set of label values.
func predictionLabel(name string) string {
	switch name {
	case "in force":
		return "in_force"
	case "recommended":
		return "recommended"
	case "memory budget":
		return "memory_budget"
	}
	return "other_mode"
}

// AdviceTimeHeader carries, on both formats of /advice, the time of the
// snapshot the answer was made from: two answers with the same one are
// the same document.
const AdviceTimeHeader = "Loomgate-Advice-Time"

// adviceNow is the advice at one moment, as one document: the advisor's
// snapshot, with the live state, the adaptive limit, the probe and the
// upstream read once beside it. /advice's JSON is this document, its text
// renders it (adviceText), and the status page renders the JSON: none of
// the three reads anything of its own.
func (s *Sidecar) adviceNow() (advice.Snapshot, AdviceDoc) {
	snap := s.advisor.Snapshot()
	return snap, s.advice(snap)
}

// serveAdvice is GET /advice: JSON, or plain sentences with ?format=text.
func (s *Sidecar) serveAdvice(w http.ResponseWriter, r *http.Request) {
	format := r.URL.Query().Get("format")
	if format != "" && format != "json" && format != "text" {
		http.Error(w, "format must be json or text", http.StatusBadRequest)
		return
	}
	snap, doc := s.adviceNow()
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set(AdviceTimeHeader, doc.Time.Format(time.RFC3339Nano))
	if format == "text" {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Write([]byte(adviceText(snap, doc)))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(doc)
}

// adviceText is the document in sentences: the snapshot's text, whose
// figures and recommendation the document carries, then the adaptive
// limit and the probe as the document has them.
func adviceText(snap advice.Snapshot, doc AdviceDoc) string {
	text := snap.Text()
	if doc.Adaptive != nil {
		text += adaptiveText(doc.Adaptive)
	}
	if doc.Probe != nil {
		text += probeText(doc.Probe)
	}
	return text
}

// adaptiveText is the adaptive limit in sentences, for /advice?format=text.
func adaptiveText(a *AdaptiveDoc) string {
	var b strings.Builder
	if a.Limit > 0 {
		fmt.Fprintf(&b, "\nAdaptive limit: %d.\n", a.Limit)
	} else {
		b.WriteString("\nAdaptive limit: none yet; admission is open until the upstream queues inside.\n")
	}
	for _, ch := range a.Changes[max(0, len(a.Changes)-5):] {
		fmt.Fprintf(&b, "  %s  %d → %d  %s: %s\n", ch.Time.Format(time.TimeOnly), ch.From, ch.To, strings.ReplaceAll(ch.Reason, "_", " "), ch.Detail)
	}
	return b.String()
}

// probeDoc is the probe's part of /advice.
func (s *Sidecar) probeDoc() *ProbeDoc {
	last, n := s.probe.Last()
	doc := &ProbeDoc{Probes: n, Active: s.probe.Active()}
	if n == 0 {
		return doc
	}
	r := &ProbeReportDoc{Start: last.Start, End: last.End, Result: string(last.Result), InFlight: last.Load,
		Throughput: last.Throughput, ServiceSeconds: last.Service.Seconds(), Capacity: last.Capacity,
		Steps: []ProbeStepDoc{}, Detail: last.Detail}
	for _, st := range last.Steps {
		r.Steps = append(r.Steps, ProbeStepDoc{Cap: st.Cap, InFlight: st.Load, Throughput: st.Throughput, ServiceSeconds: st.Service.Seconds(), Held: st.Held})
	}
	doc.Last = r
	return doc
}

// probeText is the probe in sentences, for /advice?format=text.
func probeText(p *ProbeDoc) string {
	switch {
	case p.Active:
		return "\nProbe: under way, admitting fewer for a few seconds.\n"
	case p.Probes == 0 || p.Last == nil:
		return "\nProbe: none yet; one runs when the upstream was never seen at a calmer load than now.\n"
	}
	last := p.Last
	return fmt.Sprintf("\nProbe: %d so far; the last, at %s for %.1f s: %s: %s.\n", p.Probes, last.Start.Format(time.TimeOnly),
		last.End.Sub(last.Start).Seconds(), strings.ReplaceAll(last.Result, "_", " "), last.Detail)
}

// retryAfter is the proxy's RetryAfter: the expected wait of a rejected
// client from the live state, by advice.RetryAfter's formula.
//
//   - queue full: a retry would stand behind everyone queued, at queued+1;
//   - queue timeout: behind the queue it leaves, at its length;
//   - bulkhead full: at the bulkhead's waiters + 1, at most BULKHEAD_WAIT
//     (at least 1 s, when it is 0 and rejection is immediate);
//   - memory full: memory is freed as any request in flight finishes, so
//     the wait is one service time shared by all in flight.
//
// The ceiling is the longest the retry could itself wait before rejection:
// QUEUE_TIMEOUT in fixed and adaptive mode, BULKHEAD_WAIT in unbounded mode.
func (s *Sidecar) retryAfter(kind proxy.Kind) time.Duration {
	st := s.Stats()
	service := s.advisor.MeanService()
	ceiling := s.policy.maxWait
	switch kind {
	case proxy.RejectedQueueFull, proxy.RejectedBulkhead:
		return advice.RetryAfter(st.Queued+1, st.Limit, service, ceiling)
	case proxy.RejectedQueueTimeout:
		return advice.RetryAfter(st.Queued, st.Limit, service, ceiling)
	case proxy.RejectedMemory:
		return advice.RetryAfter(1, int(st.InFlight), service, ceiling)
	}
	return time.Second
}
