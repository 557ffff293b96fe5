package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net/url"
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
	metricRSS         = "process_resident_memory_bytes"
)

// scrapeEvery is how often the sidecar, and the upstream's memory, are
// read during the window. The peak of the window is the highest of these
// readings.
const scrapeEvery = 250 * time.Millisecond

const (
	scrapeTimeout  = 2 * time.Second
	maxScrapeBytes = 16 << 20
)

// sample is one reading of a sidecar's /metrics. Sums and counts are
// cumulative; the rest are the values at the time of the scrape.
type sample struct {
	loomgate bool // the sidecar's series were there

	queueSum, queueCount     float64
	serviceSum, serviceCount float64

	inFlightPeak, queuedPeak float64
	limit                    float64
	rss                      float64
}

// parseSample reads a Prometheus text exposition. Series it does not know
// are ignored, and missing ones read as zero: any exporter may be pointed
// at, a sidecar's or not.
func parseSample(r io.Reader) (sample, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return sample{}, err
	}
	var s sample
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
	s.inFlightPeak = max(gauge(families, metricInFlightMax), gauge(families, metricInFlight))
	s.queuedPeak = max(gauge(families, metricQueuedMax), gauge(families, metricQueued))
	s.limit = gauge(families, metricLimit)
	s.rss = gauge(families, metricRSS)
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

// span accumulates the samples of a window.
type span struct {
	first, last sample
	n           int
	peakIn      float64
	peakQueued  float64
	peakRSS     float64
}

// add takes the next sample. The first one is the baseline: its peaks
// cover the time before the window and are left out.
func (sp *span) add(s sample) {
	if sp.n == 0 {
		sp.first = s
		sp.peakRSS = s.rss
	} else {
		sp.peakIn = max(sp.peakIn, s.inFlightPeak)
		sp.peakQueued = max(sp.peakQueued, s.queuedPeak)
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
		Loomgate:     last.loomgate,
		QueueWait:    meanOver(first.queueSum, last.queueSum, first.queueCount, last.queueCount),
		Service:      meanOver(first.serviceSum, last.serviceSum, first.serviceCount, last.serviceCount),
		PeakInFlight: int(sp.peakIn),
		PeakQueued:   int(sp.peakQueued),
		Limit:        int(last.limit),
		MemoryBytes:  int64(sp.peakRSS),
	}
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

// scraper reads one admin endpoint.
type scraper struct {
	url    string
	client *fasthttp.Client
}

func newScraper(admin string) (*scraper, error) {
	u, err := url.Parse(admin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%w: AdminURL %q: want the sidecar's admin URL, e.g. http://127.0.0.1:9090", ErrConfig, admin)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/metrics"
	}
	return &scraper{
		url: u.String(),
		client: &fasthttp.Client{
			Name:                      "loomgate-bench",
			MaxResponseBodySize:       maxScrapeBytes,
			MaxIdemponentCallAttempts: 1,
		},
	}, nil
}

func (sc *scraper) scrape() (sample, error) {
	var s sample
	err := sc.fetch(func(body io.Reader) (err error) {
		s, err = parseSample(body)
		return err
	})
	return s, err
}

// fetch GETs the endpoint in the text format, which the parsers read, and
// hands parse the body, which is valid only during the call.
func (sc *scraper) fetch(parse func(io.Reader) error) error {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(sc.url)
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	if err := sc.client.DoTimeout(req, resp, scrapeTimeout); err != nil {
		return err
	}
	if code := resp.StatusCode(); code != fasthttp.StatusOK {
		return fmt.Errorf("status %d", code)
	}
	return parse(bytes.NewReader(resp.Body()))
}

type sidecarResult struct {
	stats *SidecarStats
	err   error
}

// watch reads the endpoint at every tick of during. A failed scrape is
// skipped; the last error is reported if fewer than two succeeded.
func (sc *scraper) watch(ctx context.Context, win window) sidecarResult {
	var sp span
	var lastErr error
	err := during(ctx, win, func() {
		s, err := sc.scrape()
		if err != nil {
			lastErr = err
			return
		}
		sp.add(s)
	})
	if err != nil {
		return sidecarResult{err: err}
	}
	st := sp.stats()
	if st == nil {
		if lastErr == nil {
			lastErr = fmt.Errorf("fewer than two readings in the window")
		}
		return sidecarResult{err: lastErr}
	}
	return sidecarResult{stats: st}
}

// during calls take when the window opens, every scrapeEvery during it and
// when it closes: the cadence at which everything the rig reads over a
// window is read. It returns ctx's error if ctx ends first.
func during(ctx context.Context, win window, take func()) error {
	if !sleepUntil(ctx, win.start) {
		return ctx.Err()
	}
	take()
	tick := time.NewTicker(scrapeEvery)
	defer tick.Stop()
	for {
		wait := time.Until(win.end)
		if wait <= 0 {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			if time.Until(win.end) > scrapeEvery/2 {
				take()
			}
		case <-time.After(wait):
		}
	}
	take()
	return nil
}

type rssResult struct {
	peak int64
	err  error
}

// peakRSS reads a process's resident memory at every tick of during and
// keeps the highest reading. A failed reading is skipped; the last error
// is reported if none succeeded.
func peakRSS(ctx context.Context, win window, rss func() (int64, error)) rssResult {
	var peak int64
	var lastErr error
	err := during(ctx, win, func() {
		b, err := rss()
		if err != nil {
			lastErr = err
			return
		}
		peak = max(peak, b)
	})
	if err != nil {
		return rssResult{err: err}
	}
	if peak == 0 {
		return rssResult{err: lastErr}
	}
	return rssResult{peak: peak}
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

// PeakRSS reads a process's resident memory when [start, end) opens, every
// 250 ms during it and when it closes, at the cadence of every reading the
// rig takes over a window, and returns the highest reading; the error is
// the last failed reading's when none succeeded, or ctx's.
func PeakRSS(ctx context.Context, start, end time.Time, rss func() (int64, error)) (int64, error) {
	r := peakRSS(ctx, window{start: start, end: end}, rss)
	return r.peak, r.err
}
