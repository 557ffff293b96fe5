package bench

import (
	"context"
	"io"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

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

const metricRequests = "loomgate_requests_total"

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

// openSample is one reading of a sidecar's /metrics for an open-loop run.
type openSample struct {
	at       time.Duration
	loomgate bool

	queued, queuedMax, inFlight, inFlightMax, limit float64

	outcomes map[string]float64
	// bounds are the queue-wait histogram's upper bounds, the last +Inf;
	// cum the cumulative count at each.
	bounds, cum []float64
}

func parseOpenSample(r io.Reader) (openSample, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return openSample{}, err
	}
	s := openSample{outcomes: map[string]float64{}}
	for _, name := range []string{metricService, metricLimit, metricInFlight} {
		if families[name] != nil {
			s.loomgate = true
		}
	}
	s.queued = gauge(families, metricQueued)
	s.queuedMax = max(gauge(families, metricQueuedMax), s.queued)
	s.inFlight = gauge(families, metricInFlight)
	s.inFlightMax = max(gauge(families, metricInFlightMax), s.inFlight)
	s.limit = gauge(families, metricLimit)
	for _, m := range families[metricRequests].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "outcome" {
				s.outcomes[l.GetValue()] += m.GetCounter().GetValue()
			}
		}
	}
	s.bounds, s.cum = classicBuckets(families[metricQueueWait])
	return s, nil
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

func (sc *scraper) scrapeOpen() (openSample, error) {
	var s openSample
	err := sc.fetch(func(body io.Reader) (err error) {
		s, err = parseOpenSample(body)
		return err
	})
	return s, err
}

type openSidecarResult struct {
	stats *OpenSidecar
	err   error
}

// watchOpen reads the endpoint every scrapeEvery from begin, and exactly
// when the window opens and closes, until ctx ends; then once more, when
// the run has finished. first is the reading taken before the load began.
func (sc *scraper) watchOpen(ctx context.Context, begin time.Time, win window, first openSample) openSidecarResult {
	samples := []openSample{first}
	var lastErr error
	take := func() {
		s, err := sc.scrapeOpen()
		if err != nil {
			lastErr = err
			return
		}
		s.at = time.Since(begin)
		samples = append(samples, s)
	}
	opens, closes := win.start.Sub(begin), win.end.Sub(begin)
	for k := 1; ; k++ {
		at := time.Duration(k) * scrapeEvery
		// The window's edges are read exactly, in place of the tick
		// nearest before them.
		for _, edge := range []time.Duration{opens, closes} {
			if edge > at-scrapeEvery && edge < at {
				at = edge
			}
		}
		if !sleepUntil(ctx, begin.Add(at)) {
			break
		}
		take()
	}
	take()
	if len(samples) < 2 {
		return openSidecarResult{err: lastErr}
	}
	return openSidecarResult{stats: openStats(samples, opens, closes)}
}

// openStats derives the run's figures from its readings, the first taken
// at the start of the load.
func openStats(samples []openSample, opens, closes time.Duration) *OpenSidecar {
	last := samples[len(samples)-1]
	st := &OpenSidecar{Loomgate: last.loomgate, Limit: int(last.limit)}
	if !st.Loomgate {
		return st
	}
	// The readings nearest the window's edges.
	edge := func(t time.Duration) openSample {
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
		if i > 0 && s.at > opens && s.at <= closes+scrapeEvery/2 {
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
func alertExpr(samples []openSample) float64 {
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
