// Package scrape reads a loomgate sidecar's /metrics during a bench run,
// on one schedule: every Every from the start of the load, the window's
// edges read exactly. A closed-loop run keeps the readings of its window
// and derives means and peaks (SidecarStats); an open-loop run keeps every
// reading from the start of the load to the end of the run, and derives
// the queue's course and the queue-time alert's (OpenSidecar). It also
// reads another process's memory on the same schedule (PeakRSS).
package scrape

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/url"
	"slices"
	"sort"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/valyala/fasthttp"
)

// Series read from a sidecar's /metrics; the names are loomgate's contract.
const (
	metricQueueWait   = "loomgate_queue_wait_seconds"
	metricService     = "loomgate_service_seconds"
	metricInFlight    = "loomgate_in_flight"
	metricInFlightMax = "loomgate_in_flight_max"
	metricQueued      = "loomgate_queued"
	metricQueuedMax   = "loomgate_queued_max"
	metricLimit       = "loomgate_limit"
	metricRequests    = "loomgate_requests_total"
	metricRSS         = "process_resident_memory_bytes"
	metricCPU         = "process_cpu_seconds_total"
)

// Every is how often the sidecar, and the upstream's memory, are
// read during a run. The peak of a window is the highest of these
// readings.
const Every = 250 * time.Millisecond

// Window is a run's measurement window: [Start, End).
type Window struct {
	Start, End time.Time
}

const (
	scrapeTimeout  = 2 * time.Second
	maxScrapeBytes = 16 << 20
)

// Sample is one reading of a sidecar's /metrics. Sums, counts, outcomes
// and buckets are cumulative; the rest are the values at the time of the
// scrape.
type Sample struct {
	// at is the time of the reading, from the start of the load.
	at time.Duration
	// loomgate reports that the sidecar's series were there.
	loomgate bool

	queueSum, queueCount     float64
	serviceSum, serviceCount float64

	// queuedMax and inFlightMax are the highest counts since the reading
	// before (the *_max gauges), never below the current ones.
	queued, queuedMax     float64
	inFlight, inFlightMax float64
	limit                 float64
	rss                   float64
	cpu                   float64 // seconds, cumulative

	// outcomes is loomgate_requests_total by outcome, nil without it.
	outcomes map[string]float64
	// bounds are the queue-wait histogram's upper bounds, the last +Inf;
	// cum the cumulative count at each.
	bounds, cum []float64
}

// parseSample reads a Prometheus text exposition. Series it does not know
// are ignored, and missing ones read as zero: any exporter may be pointed
// at, a sidecar's or not.
func parseSample(r io.Reader) (Sample, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return Sample{}, err
	}
	var s Sample
	// A sidecar is told by its own series, not by the loomgate_ prefix,
	// which the stub's metrics share.
	for _, name := range []string{metricService, metricService + "_count", metricLimit, metricInFlight} {
		if families[name] != nil {
			s.loomgate = true
		}
	}
	s.queueSum, s.queueCount = histogram(families, metricQueueWait)
	s.serviceSum, s.serviceCount = histogram(families, metricService)
	// A sidecar without the *_max gauges still shows its current counts.
	s.queued = gauge(families, metricQueued)
	s.queuedMax = max(gauge(families, metricQueuedMax), s.queued)
	s.inFlight = gauge(families, metricInFlight)
	s.inFlightMax = max(gauge(families, metricInFlightMax), s.inFlight)
	s.limit = gauge(families, metricLimit)
	s.rss = gauge(families, metricRSS)
	s.cpu = gauge(families, metricCPU)
	for _, m := range families[metricRequests].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "outcome" {
				if s.outcomes == nil {
					s.outcomes = map[string]float64{}
				}
				s.outcomes[l.GetValue()] += m.GetCounter().GetValue()
			}
		}
	}
	s.bounds, s.cum = classicBuckets(families[metricQueueWait])
	return s, nil
}

// histogram returns the sum and count of a histogram family, summed over
// its series. A family exposed without its TYPE line arrives as separate
// untyped _sum and _count families; both forms are read.
func histogram(families map[string]*dto.MetricFamily, name string) (sum, count float64) {
	if f := families[name]; f != nil {
		for _, m := range f.GetMetric() {
			switch {
			case m.Histogram != nil:
				sum += m.GetHistogram().GetSampleSum()
				count += float64(m.GetHistogram().GetSampleCount())
			case m.Summary != nil:
				sum += m.GetSummary().GetSampleSum()
				count += float64(m.GetSummary().GetSampleCount())
			}
		}
		return sum, count
	}
	return gauge(families, name+"_sum"), gauge(families, name+"_count")
}

// gauge returns the sum of a gauge, counter or untyped family over its
// series, 0 if absent.
func gauge(families map[string]*dto.MetricFamily, name string) float64 {
	var v float64
	for _, m := range families[name].GetMetric() {
		var x float64
		switch {
		case m.Gauge != nil:
			x = m.GetGauge().GetValue()
		case m.Counter != nil:
			x = m.GetCounter().GetValue()
		case m.Untyped != nil:
			x = m.GetUntyped().GetValue()
		}
		if !math.IsNaN(x) && !math.IsInf(x, 0) {
			v += x
		}
	}
	return v
}

// classicBuckets sums a histogram family's classic buckets over its series,
// by upper bound, and closes them with +Inf.
func classicBuckets(f *dto.MetricFamily) (bounds, cum []float64) {
	byBound := map[float64]float64{}
	total := 0.0
	for _, m := range f.GetMetric() {
		h := m.GetHistogram()
		if h == nil {
			continue
		}
		for _, b := range h.GetBucket() {
			c := b.GetCumulativeCountFloat()
			if c == 0 {
				c = float64(b.GetCumulativeCount())
			}
			byBound[b.GetUpperBound()] += c
		}
		n := h.GetSampleCountFloat()
		if n == 0 {
			n = float64(h.GetSampleCount())
		}
		total += n
	}
	if len(byBound) == 0 && total == 0 {
		return nil, nil
	}
	byBound[math.Inf(1)] = max(byBound[math.Inf(1)], total)
	for b := range byBound {
		bounds = append(bounds, b)
	}
	slices.Sort(bounds)
	cum = make([]float64, len(bounds))
	for i, b := range bounds {
		cum[i] = byBound[b]
	}
	return bounds, cum
}

// ErrAdminURL is returned, wrapped, by New for a URL it cannot read.
var ErrAdminURL = errors.New("AdminURL")

// Scraper reads one admin endpoint.
type Scraper struct {
	url    string // the endpoint, /metrics unless the admin URL named another
	client *fasthttp.Client
}

// New reads the sidecar's admin URL (its /metrics when the path is
// empty).
func New(admin string) (*Scraper, error) {
	u, err := url.Parse(admin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%w: %q: want the sidecar's admin URL, e.g. http://127.0.0.1:9090", ErrAdminURL, admin)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/metrics"
	}
	return &Scraper{
		url: u.String(),
		client: &fasthttp.Client{
			Name:                      "loomgate-bench",
			MaxResponseBodySize:       maxScrapeBytes,
			MaxIdemponentCallAttempts: 1,
		},
	}, nil
}

// URL is the endpoint read.
func (sc *Scraper) URL() string { return sc.url }

// Read GETs the endpoint in the text format and reads it.
func (sc *Scraper) Read() (Sample, error) {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(sc.url)
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	if err := sc.client.DoTimeout(req, resp, scrapeTimeout); err != nil {
		return Sample{}, err
	}
	if code := resp.StatusCode(); code != fasthttp.StatusOK {
		return Sample{}, fmt.Errorf("status %d", code)
	}
	return parseSample(bytes.NewReader(resp.Body()))
}

// readEvery calls take at begin + k·Every, k = 0, 1, ..., the
// window's edges read exactly in place of the tick nearest after each, for
// the times from from to until, both included. It returns ctx's error if
// ctx ends first: the cadence at which everything the rig reads over a run
// is read.
func readEvery(ctx context.Context, begin time.Time, win Window, from, until time.Time, take func(at time.Duration)) error {
	opens, closes := win.Start.Sub(begin), win.End.Sub(begin)
	for k := 0; ; k++ {
		at := time.Duration(k) * Every
		for _, edge := range []time.Duration{opens, closes} {
			if edge > at-Every && edge <= at {
				at = edge
			}
		}
		t := begin.Add(at)
		if t.Before(from) {
			continue
		}
		if t.After(until) {
			return nil
		}
		if !sleepUntil(ctx, t) {
			return ctx.Err()
		}
		take(at)
	}
}

// watch reads the endpoint on readEvery's schedule from from to until, or
// to ctx's end; a failed reading is skipped and its error kept.
func (sc *Scraper) watch(ctx context.Context, begin time.Time, win Window, from, until time.Time) (samples []Sample, lastErr, ctxErr error) {
	ctxErr = readEvery(ctx, begin, win, from, until, func(at time.Duration) {
		s, err := sc.Read()
		if err != nil {
			lastErr = err
			return
		}
		s.at = at
		samples = append(samples, s)
	})
	return samples, lastErr, ctxErr
}

// OverWindow reads the endpoint over the window of a closed-loop run that
// began at begin. The last error is reported if fewer than two readings
// succeeded.
func (sc *Scraper) OverWindow(ctx context.Context, begin time.Time, win Window) (*SidecarStats, error) {
	samples, lastErr, err := sc.watch(ctx, begin, win, win.Start, win.End)
	if err != nil {
		return nil, err
	}
	var sp span
	for _, s := range samples {
		sp.add(s)
	}
	st := sp.stats()
	if st == nil {
		if lastErr == nil {
			lastErr = errors.New("fewer than two readings in the window")
		}
		return nil, lastErr
	}
	return st, nil
}

// OverRun reads the endpoint from the start of the load until ctx ends,
// then once more, when the run has finished, for an open-loop run. first
// is the reading taken before the load began. The last error is reported
// if fewer than two readings succeeded.
func (sc *Scraper) OverRun(ctx context.Context, begin time.Time, win Window, first Sample) (*OpenSidecar, error) {
	// The reading before the load stands for the one at its start.
	samples, lastErr, _ := sc.watch(ctx, begin, win, begin.Add(1), time.Now().Add(100*365*24*time.Hour))
	samples = append([]Sample{first}, samples...)
	if s, err := sc.Read(); err == nil {
		s.at = time.Since(begin)
		samples = append(samples, s)
	} else {
		lastErr = err
	}
	if len(samples) < 2 {
		return nil, lastErr
	}
	return openStats(samples, win.Start.Sub(begin), win.End.Sub(begin)), nil
}

// SidecarStats is a loomgate sidecar's own account of the window, read from
// its /metrics.
type SidecarStats struct {
	// Loomgate reports whether the endpoint exposed loomgate's series. When
	// false, it was some other exporter (a stub's, a service's) and only
	// MemoryBytes is known.
	Loomgate bool

	// QueueWait and Service are the mean queue wait and service time of the
	// requests the sidecar finished in the window.
	QueueWait time.Duration
	Service   time.Duration

	// PeakInFlight and PeakQueued are the highest admitted and waiting
	// counts the sidecar saw during the window.
	PeakInFlight int
	PeakQueued   int

	// Limit is the sidecar's enforced concurrency limit, 0 when none.
	Limit int

	// MemoryBytes is the highest resident memory of the sidecar's process
	// during the window, 0 if it was not exposed.
	MemoryBytes int64

	// CPUPerRequest is the CPU time (user and system) the sidecar's
	// process spent over the window per request it finished in it, from
	// process_cpu_seconds_total and loomgate_requests_total: what the
	// sidecar costs per request. Its resolution is the kernel's 10 ms of
	// CPU, so a window needs seconds of it to be read to 1%. It is the
	// whole process's: a sidecar in the rig's process counts the rig and
	// the stub too. 0 when unknown.
	CPUPerRequest time.Duration
}

// span accumulates the samples of a window.
type span struct {
	first, last Sample
	n           int
	peakIn      float64
	peakQueued  float64
	peakRSS     float64
}

// add takes the next Sample. The first one is the baseline: its peaks
// cover the time before the window and are left out.
func (sp *span) add(s Sample) {
	if sp.n == 0 {
		sp.first = s
		sp.peakRSS = s.rss
	} else {
		sp.peakIn = max(sp.peakIn, s.inFlightMax)
		sp.peakQueued = max(sp.peakQueued, s.queuedMax)
		sp.peakRSS = max(sp.peakRSS, s.rss)
	}
	sp.last = s
	sp.n++
}

// stats derives the window's figures. It needs two samples at least.
func (sp *span) stats() *SidecarStats {
	if sp.n < 2 {
		return nil
	}
	first, last := sp.first, sp.last
	return &SidecarStats{
		Loomgate:      last.loomgate,
		QueueWait:     meanOver(first.queueSum, last.queueSum, first.queueCount, last.queueCount),
		Service:       meanOver(first.serviceSum, last.serviceSum, first.serviceCount, last.serviceCount),
		PeakInFlight:  int(sp.peakIn),
		PeakQueued:    int(sp.peakQueued),
		Limit:         int(last.limit),
		MemoryBytes:   int64(sp.peakRSS),
		CPUPerRequest: cpuPerRequest(first, last),
	}
}

// cpuPerRequest is the CPU time the process spent between two readings
// over the requests the sidecar finished between them, whatever their
// outcome: what a request costs it, rejections included. 0 when either is
// unknown.
func cpuPerRequest(first, last Sample) time.Duration {
	var n float64
	for k, v := range last.outcomes {
		n += v - first.outcomes[k]
	}
	cpu := last.cpu - first.cpu
	if n <= 0 || cpu <= 0 {
		return 0
	}
	return time.Duration(math.Round(cpu / n * float64(time.Second)))
}

// meanOver is Δsum / Δcount in seconds, rounded to the microsecond, or 0
// when nothing was counted or the counters went backwards (a restart).
func meanOver(sum0, sum1, count0, count1 float64) time.Duration {
	dc, ds := count1-count0, sum1-sum0
	if dc <= 0 || ds < 0 {
		return 0
	}
	return time.Duration(math.Round(ds/dc*1e6)) * time.Microsecond
}

// PeakRSS reads a process's resident memory on the schedule of every
// reading of a run that began at begin, over win, and keeps the highest
// reading. A failed reading is skipped; the error is the last failed
// reading's when none succeeded, or ctx's.
func PeakRSS(ctx context.Context, begin time.Time, win Window, rss func() (int64, error)) (int64, error) {
	var peak int64
	var lastErr error
	err := readEvery(ctx, begin, win, win.Start, win.End, func(time.Duration) {
		b, err := rss()
		if err != nil {
			lastErr = err
			return
		}
		peak = max(peak, b)
	})
	if err != nil {
		return 0, err
	}
	if peak == 0 {
		return 0, lastErr
	}
	return peak, nil
}

// The queue-time alert of deploy/prometheus/rules.yml, LoomgateQueueTimeHigh:
//
//	histogram_quantile(0.99, rate(loomgate_queue_wait_seconds_bucket[1m])) > 0.25
//
// An open-loop run evaluates the same expression at every scrape of the
// sidecar and reports when it first held. The alert itself also wants it
// to hold for 10 minutes, which no run here lasts; the run reports the
// crossing, not a firing.
const (
	AlertName      = "LoomgateQueueTimeHigh"
	AlertQuantile  = 0.99
	AlertRange     = time.Minute
	AlertThreshold = 250 * time.Millisecond
)

// OpenSidecar is a loomgate sidecar's own account of an open-loop run, read
// from its /metrics from the start of the load to the end of the run.
type OpenSidecar struct {
	// Loomgate reports whether the endpoint exposed loomgate's series;
	// when false, nothing else here is known.
	Loomgate bool
	// Limit is the sidecar's enforced concurrency limit, 0 when none.
	Limit int

	// Timeline is every reading, from the start of the load.
	Timeline []QueuePoint

	// QueuedStart and QueuedEnd are loomgate_queued when the window
	// opened and when it closed; PeakQueued and PeakInFlight the highest
	// the sidecar saw in between.
	QueuedStart, QueuedEnd, PeakQueued int
	PeakInFlight                       int

	// Outcomes counts the requests the sidecar finished during the window,
	// by loomgate_requests_total's outcome label; outcomes with no request
	// are left out.
	Outcomes map[string]int64

	// QueueP99Max is the highest the alert's expression reached.
	QueueP99Max time.Duration
	// Alerted reports that the expression exceeded AlertThreshold, and
	// AlertAt when it first did, from the start of the load.
	Alerted bool
	AlertAt time.Duration
}

// QueuePoint is one reading of the sidecar.
type QueuePoint struct {
	// At is the time of the reading, from the start of the load.
	At time.Duration
	// Queued and InFlight are the gauges at the reading; QueuedMax the
	// highest queue since the reading before.
	Queued, QueuedMax, InFlight int
	// QueueP99 is the alert's expression at the reading: the 99th
	// percentile queue wait over the last AlertRange. Zero when no request
	// finished in that range.
	QueueP99 time.Duration
}

// Rejected is the number of requests the sidecar rejected during the
// window, all reasons together.
func (sc *OpenSidecar) Rejected() int64 {
	var n int64
	for k, v := range sc.Outcomes {
		if strings.HasPrefix(k, "rejected_") {
			n += v
		}
	}
	return n
}

// openStats derives the run's figures from its readings, the first taken
// at the start of the load.
func openStats(samples []Sample, opens, closes time.Duration) *OpenSidecar {
	last := samples[len(samples)-1]
	st := &OpenSidecar{Loomgate: last.loomgate, Limit: int(last.limit)}
	if !st.Loomgate {
		return st
	}
	// The readings nearest the window's edges.
	edge := func(t time.Duration) Sample {
		best := samples[0]
		for _, s := range samples {
			if (s.at - t).Abs() < (best.at - t).Abs() {
				best = s
			}
		}
		return best
	}
	start, end := edge(opens), edge(closes)
	st.QueuedStart, st.QueuedEnd = int(start.queued), int(end.queued)
	st.Outcomes = map[string]int64{}
	for k, v := range end.outcomes {
		if d := int64(math.Round(v - start.outcomes[k])); d > 0 {
			st.Outcomes[k] = d
		}
	}
	for i, s := range samples {
		p := QueuePoint{At: s.at, Queued: int(s.queued), QueuedMax: int(s.queuedMax), InFlight: int(s.inFlight)}
		if q := alertExpr(samples[:i+1]); !math.IsNaN(q) {
			p.QueueP99 = time.Duration(math.Round(q * float64(time.Second)))
			st.QueueP99Max = max(st.QueueP99Max, p.QueueP99)
			if q > AlertThreshold.Seconds() && !st.Alerted {
				st.Alerted, st.AlertAt = true, s.at
			}
		}
		st.Timeline = append(st.Timeline, p)
		// A reading's peaks cover the time since the one before it.
		if i > 0 && s.at > opens && s.at <= closes+Every/2 {
			st.PeakQueued = max(st.PeakQueued, int(s.queuedMax))
			st.PeakInFlight = max(st.PeakInFlight, int(s.inFlightMax))
		}
	}
	return st
}

// alertExpr evaluates the alert's expression at the last of samples:
// histogram_quantile over the increase of each bucket across the samples
// of the last AlertRange. rate() divides every bucket's increase by the
// same span (and extrapolates them alike), which the quantile does not
// see, so the increase gives the same answer. NaN when fewer than two
// samples fall in the range or nothing was observed.
func alertExpr(samples []Sample) float64 {
	now := samples[len(samples)-1]
	// Prometheus 3 selects (t - range, t].
	i := sort.Search(len(samples), func(i int) bool { return samples[i].at > now.at-AlertRange })
	if i >= len(samples)-1 {
		return math.NaN()
	}
	base := samples[i]
	if len(now.bounds) == 0 || !slices.Equal(base.bounds, now.bounds) {
		// No histogram yet, or a restart changed it: no rate either.
		return math.NaN()
	}
	inc := make([]float64, len(now.cum))
	for k := range inc {
		if now.cum[k] < base.cum[k] {
			return math.NaN() // a counter reset; rate would piece it together
		}
		inc[k] = now.cum[k] - base.cum[k]
	}
	return histogramQuantile(AlertQuantile, now.bounds, inc)
}

// histogramQuantile is PromQL's histogram_quantile over one classic
// histogram: bounds ascending, the last +Inf, counts cumulative. It
// interpolates linearly inside the bucket holding the rank, the first
// bucket starting at 0 (or answering its bound if that is not above 0); a
// rank in the +Inf bucket answers the highest finite bound. Counts that
// decrease from one bucket to the next are raised to the one before, as
// Prometheus does. NaN when there are no observations, fewer than two
// buckets, or no +Inf bucket.
func histogramQuantile(q float64, bounds, counts []float64) float64 {
	switch {
	case math.IsNaN(q):
		return math.NaN()
	case q < 0:
		return math.Inf(-1)
	case q > 1:
		return math.Inf(1)
	}
	n := len(bounds)
	if n < 2 || len(counts) != n || !math.IsInf(bounds[n-1], 1) {
		return math.NaN()
	}
	c := slices.Clone(counts)
	for i := 1; i < n; i++ {
		c[i] = max(c[i], c[i-1])
	}
	total := c[n-1]
	if total == 0 {
		return math.NaN()
	}
	rank := q * total
	b := sort.Search(n-1, func(i int) bool { return c[i] >= rank })
	if b == n-1 {
		return bounds[n-2]
	}
	if b == 0 && bounds[0] <= 0 {
		return bounds[0]
	}
	lower, inBucket := 0.0, c[b]
	if b > 0 {
		lower = bounds[b-1]
		inBucket -= c[b-1]
		rank -= c[b-1]
	}
	return lower + (bounds[b]-lower)*(rank/inBucket)
}

// sleepUntil waits for t, or for ctx to end, which it reports as false.
func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}
