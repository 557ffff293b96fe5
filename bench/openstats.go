package bench

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
	"github.com/valyala/fasthttp"
)

// OpenResult is one level of open-loop load: what became of the requests
// due in the window.
//
// Latencies are whole microseconds, the histograms' resolution.
type OpenResult struct {
	// Scenario and Arm name the experiment; for a plain RunOpen, Scenario
	// is empty and Arm is the target's host and path.
	Scenario string
	Arm      string
	URL      string

	// Rate is the intended arrival rate, per second.
	Rate   float64
	Window time.Duration
	// MaxInFlight is the cap the run had on requests in flight.
	MaxInFlight int

	// Due is how many requests the schedule had in the window, Sent how
	// many of them went out (the rest are Counts.NotSent).
	Due, Sent int64
	// SendRate is the requests sent during the window, per second of it:
	// the rate the rig achieved.
	SendRate float64
	// Late is how many requests due in the window went out more than
	// LateAfter after they were due; SendLagP99 and SendLagMax are how late
	// the sends were.
	Late                   int64
	SendLagP99, SendLagMax time.Duration

	// Throughput is the 2xx answers that arrived during the window, per
	// second of it, whenever their requests were due: what the target
	// served. (While a queue grows, the requests due in the window are
	// served over a longer span, so counting those would overstate it.)
	Throughput float64

	// Latency of the 2xx answers, from the time each request was due to
	// its response being read.
	P50, P90, P99, Max time.Duration

	Counts OpenCounts

	// RetryAfter summarises the Retry-After header of the 503s.
	RetryAfter RetryAfter

	// PeakInFlight is the most requests the rig had in flight at once.
	PeakInFlight int

	// Sidecar is what the sidecar's /metrics said, nil when
	// OpenConfig.AdminURL was empty or could not be read.
	Sidecar *OpenSidecar
}

// OpenCounts is what became of the requests due in the window. Every such
// request is in exactly one count.
type OpenCounts struct {
	OK          int64 // a 2xx response
	Unavailable int64 // 503, e.g. a sidecar's rejection
	GatewayTime int64 // 504
	OtherStatus int64 // any other response
	Errors      int64 // the connection could not be opened, or broke
	Timeouts    int64 // no answer within OpenConfig.Timeout of being due
	NotSent     int64 // MaxInFlight requests were already in flight
}

// Total is the number of requests counted.
func (c OpenCounts) Total() int64 {
	return c.OK + c.Unavailable + c.GatewayTime + c.OtherStatus + c.Errors + c.Timeouts + c.NotSent
}

// RetryAfter is the distribution of the whole seconds a Retry-After header
// asked for, over the 503s that carried one.
type RetryAfter struct {
	N                int64
	Min, Median, Max int64
}

func (ra RetryAfter) String() string {
	if ra.N == 0 {
		return ""
	}
	if ra.Min == ra.Max {
		return fmt.Sprintf("%d s", ra.Min)
	}
	return fmt.Sprintf("%d/%d/%d s", ra.Min, ra.Median, ra.Max)
}

// openRecorder is one worker's account; only its worker writes it.
type openRecorder struct {
	win          window
	latency, lag *shard

	latBatch, lagBatch [openBatch]int64
	nLat, nLag         int

	counts        OpenCounts
	sent, sentWin int64
	okWin         int64 // 2xx answered in the window, due whenever
	late          int64
	maxLatUS      int64
	maxLagUS      int64
	retryFor      map[int64]int64 // Retry-After seconds → count
}

// openBatch is how many values a worker keeps before taking a shard's
// lock. Smaller than the closed loop's: an open loop may have thousands of
// workers, and each holds two batches.
const openBatch = 64

// record accounts for one request due at due, sent at sent, answered (or
// given up) at done.
func (rec *openRecorder) record(due, sent, done time.Time, a answer) {
	if errors.Is(a.err, fasthttp.ErrNoFreeConns) {
		if rec.win.contains(due) {
			rec.counts.NotSent++
		}
		return
	}
	if rec.win.contains(sent) {
		rec.sentWin++
	}
	if a.err == nil && a.status >= 200 && a.status < 300 && rec.win.contains(done) {
		rec.okWin++
	}
	if !rec.win.contains(due) {
		return
	}
	rec.sent++
	lag := max(sent.Sub(due), 0)
	if lag > LateAfter {
		rec.late++
	}
	lagUS := min(lag.Microseconds(), histMax)
	rec.maxLagUS = max(rec.maxLagUS, lagUS)
	rec.lagBatch[rec.nLag] = lagUS
	rec.nLag++
	if rec.nLag == len(rec.lagBatch) {
		rec.flushLag()
	}

	switch classify(a.err, a.status) {
	case kindOK:
		rec.counts.OK++
		us := min(max(done.Sub(due).Microseconds(), histMin), histMax)
		rec.maxLatUS = max(rec.maxLatUS, us)
		rec.latBatch[rec.nLat] = us
		rec.nLat++
		if rec.nLat == len(rec.latBatch) {
			rec.flushLat()
		}
	case kindStatus:
		switch a.status {
		case fasthttp.StatusServiceUnavailable:
			rec.counts.Unavailable++
			if a.retryAfter >= 0 {
				rec.retryFor[a.retryAfter]++
			}
		case fasthttp.StatusGatewayTimeout:
			rec.counts.GatewayTime++
		default:
			rec.counts.OtherStatus++
		}
	case kindTimeout:
		rec.counts.Timeouts++
	default:
		rec.counts.Errors++
	}
}

func (rec *openRecorder) flushLat() {
	flushInto(rec.latency, rec.latBatch[:rec.nLat])
	rec.nLat = 0
}

func (rec *openRecorder) flushLag() {
	flushInto(rec.lag, rec.lagBatch[:rec.nLag])
	rec.nLag = 0
}

func (rec *openRecorder) flush() {
	rec.flushLat()
	rec.flushLag()
}

func flushInto(s *shard, values []int64) {
	if len(values) == 0 {
		return
	}
	s.mu.Lock()
	for _, v := range values {
		// Clamped to the histogram's range by record: cannot fail.
		_ = s.h.RecordValue(v)
	}
	s.mu.Unlock()
}

func runtimeProcs() int { return runtime.GOMAXPROCS(0) }

// result merges the workers' accounts. Call it once they have stopped.
func (r *openRun) result() OpenResult {
	res := OpenResult{
		URL:          r.cfg.URL,
		Arm:          r.tgt.label,
		Rate:         r.cfg.Rate,
		Window:       r.win.end.Sub(r.win.start),
		MaxInFlight:  r.cfg.MaxInFlight,
		Due:          r.dueWin,
		PeakInFlight: int(r.peakInFlight.Load()),
	}
	res.Counts.NotSent = r.notSentW
	lat, lag := newHistogram(), newHistogram()
	var maxLat, maxLag, sentWin, okWin int64
	retry := map[int64]int64{}
	for _, rec := range r.recs {
		rec.flush()
		c := rec.counts
		res.Counts.OK += c.OK
		res.Counts.Unavailable += c.Unavailable
		res.Counts.GatewayTime += c.GatewayTime
		res.Counts.OtherStatus += c.OtherStatus
		res.Counts.Errors += c.Errors
		res.Counts.Timeouts += c.Timeouts
		res.Counts.NotSent += c.NotSent
		res.Sent += rec.sent
		res.Late += rec.late
		sentWin += rec.sentWin
		okWin += rec.okWin
		maxLat = max(maxLat, rec.maxLatUS)
		maxLag = max(maxLag, rec.maxLagUS)
		for s, n := range rec.retryFor {
			retry[s] += n
		}
	}
	half := len(r.shards) / 2
	for _, s := range r.shards[:half] {
		lat.Merge(s.h)
	}
	for _, s := range r.shards[half:] {
		lag.Merge(s.h)
	}
	secs := res.Window.Seconds()
	if secs > 0 {
		res.SendRate = float64(sentWin) / secs
		res.Throughput = float64(okWin) / secs
	}
	res.Max = time.Duration(maxLat) * time.Microsecond
	res.P50 = pctOf(lat, 50, res.Max)
	res.P90 = pctOf(lat, 90, res.Max)
	res.P99 = pctOf(lat, 99, res.Max)
	res.SendLagMax = time.Duration(maxLag) * time.Microsecond
	res.SendLagP99 = pctOf(lag, 99, res.SendLagMax)
	res.RetryAfter = retryAfterOf(retry)
	return res
}

// pctOf is the p-th percentile of h, never above the exact maximum (the
// histogram answers with the top of a bucket).
func pctOf(h *hdrhistogram.Histogram, p float64, top time.Duration) time.Duration {
	if h.TotalCount() == 0 {
		return 0
	}
	return min(time.Duration(h.ValueAtPercentile(p))*time.Microsecond, top)
}

// retryAfterOf summarises counts of Retry-After values; the median is the
// lower middle value of an even count.
func retryAfterOf(counts map[int64]int64) RetryAfter {
	var ra RetryAfter
	keys := slices.Sorted(maps.Keys(counts))
	for _, k := range keys {
		ra.N += counts[k]
	}
	if ra.N == 0 {
		return ra
	}
	ra.Min, ra.Max = keys[0], keys[len(keys)-1]
	mid, seen := (ra.N+1)/2, int64(0)
	for _, k := range keys {
		if seen += counts[k]; seen >= mid {
			ra.Median = k
			break
		}
	}
	return ra
}

// RigNotes says where the rig itself fell short of the schedule: sends
// off the intended rate by more than 1%, late sends, requests not sent
// for want of room under the cap. Empty when it kept to the schedule.
func (r OpenResult) RigNotes() []string {
	var notes []string
	if r.Rate > 0 && r.Window > 0 {
		if off := r.SendRate/r.Rate - 1; math.Abs(off) > 0.01 {
			notes = append(notes, fmt.Sprintf("sent %.1f/s, %s the intended %s/s", r.SendRate, pct(off), fmtRate(r.Rate)))
		}
	}
	if r.Late > 0 && r.Sent > 0 && float64(r.Late) > 0.01*float64(r.Sent) {
		notes = append(notes, fmt.Sprintf("%d of %d sends (%.0f%%) went out more than %s late, up to %s",
			r.Late, r.Sent, 100*float64(r.Late)/float64(r.Sent), fmtDur(LateAfter), fmtDur(r.SendLagMax)))
	}
	if r.Counts.NotSent > 0 {
		notes = append(notes, fmt.Sprintf("%d requests not sent: %d already in flight, the cap", r.Counts.NotSent, r.MaxInFlight))
	}
	return notes
}

// summary is the one-line account of a level for the progress stream.
func (r OpenResult) summary() string {
	s := fmt.Sprintf("sent %.0f/s of %s, 2xx %.0f/s, p50 %s, p99 %s, max %s; %s",
		r.SendRate, fmtRate(r.Rate), r.Throughput, fmtDur(r.P50), fmtDur(r.P99), fmtDur(r.Max), r.Counts.brief())
	if sc := r.Sidecar; sc != nil && sc.Loomgate {
		s += fmt.Sprintf("; sidecar queued %d→%d (max %d)", sc.QueuedStart, sc.QueuedEnd, sc.PeakQueued)
		if sc.Alerted {
			s += fmt.Sprintf(", queue p99 > %s from %.1f s", fmtDur(AlertThreshold), sc.AlertAt.Seconds())
		}
	}
	if notes := r.RigNotes(); len(notes) > 0 {
		s += "; rig: " + strings.Join(notes, "; ")
	}
	return s
}

// brief lists the counts that are not zero, e.g. "1000 2xx, 12 503".
func (c OpenCounts) brief() string {
	var parts []string
	for _, p := range []struct {
		n    int64
		name string
	}{{c.OK, "2xx"}, {c.Unavailable, "503"}, {c.GatewayTime, "504"}, {c.OtherStatus, "other status"},
		{c.Errors, "errors"}, {c.Timeouts, "timeouts"}, {c.NotSent, "not sent"}} {
		if p.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", p.n, p.name))
		}
	}
	if len(parts) == 0 {
		return "nothing due"
	}
	return strings.Join(parts, ", ")
}

// fmtRate writes a rate without a fraction when it has none: 1200, 0.5.
func fmtRate(r float64) string {
	return strconv.FormatFloat(r, 'f', -1, 64)
}
