package bench

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

// Result is one level of one arm: what was measured in the window.
//
// Latencies are whole microseconds, the histograms' resolution.
type Result struct {
	// Scenario and Arm name the experiment; for a plain Run, Scenario is
	// empty and Arm is the target's host and path.
	Scenario string
	Arm      string
	URL      string

	Concurrency int
	Window      time.Duration

	// Requests is the number of successes (2xx) completed in the window,
	// and RPS that number per second of window.
	Requests int64
	RPS      float64

	// Latency of the successes, from the request being sent to the
	// response being read.
	Mean, P50, P95, P99, Max time.Duration

	Errors Errors

	// Sidecar is what the sidecar's /metrics said over the window, nil when
	// Config.AdminURL was empty or could not be read.
	Sidecar *SidecarStats

	// UpstreamMemoryBytes is the highest resident memory of the upstream's
	// process during the window, 0 when unknown (Config.UpstreamRSS was
	// nil, or could not be read).
	UpstreamMemoryBytes int64

	Physics Verdict
}

// Errors counts failed requests completed in the window, by kind.
type Errors struct {
	Status  int64 // a response other than 2xx, e.g. a sidecar's 503
	Timeout int64 // no response within Config.Timeout
	Connect int64 // the connection could not be opened, or broke
}

// Total is the number of errors of all kinds.
func (e Errors) Total() int64 { return e.Status + e.Timeout + e.Connect }

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
}

// window is the measurement window: [start, end). A request belongs to it
// if it completes at or after start and strictly before end, so a request
// cut at end by its deadline is never counted.
type window struct {
	start, end time.Time
}

func (w window) contains(t time.Time) bool {
	return !t.Before(w.start) && t.Before(w.end)
}

// Histogram range: 1 µs to 5 minutes, 3 significant digits.
const (
	histMin     = 1
	histMax     = int64(5 * time.Minute / time.Microsecond)
	histSigFigs = 3
)

func newHistogram() *hdrhistogram.Histogram {
	return hdrhistogram.New(histMin, histMax, histSigFigs)
}

// batchSize is how many latencies a virtual user keeps before folding them
// into a shared histogram.
//
// A histogram of this range and precision is 160 KiB; one per virtual user
// would cost 320 MiB at c2000, in the very process whose memory the memory
// scenario measures. So users share a few histograms and take a shard's
// lock once per batchSize requests, not once per request.
const batchSize = 256

// shard is a histogram shared by some of the virtual users.
type shard struct {
	mu sync.Mutex
	h  *hdrhistogram.Histogram
}

// tally gathers what all the virtual users of a level recorded.
type tally struct {
	win    window
	shards []*shard
	recs   []*recorder
}

func newTally(win window, users int) *tally {
	n := min(users, 2*runtime.GOMAXPROCS(0))
	t := &tally{win: win, shards: make([]*shard, n), recs: make([]*recorder, users)}
	for i := range t.shards {
		t.shards[i] = &shard{h: newHistogram()}
	}
	for i := range t.recs {
		t.recs[i] = &recorder{win: win, shard: t.shards[i%n]}
	}
	return t
}

func (t *tally) recorder(i int) *recorder { return t.recs[i] }

// live returns the successes completed so far, window or not, and the
// errors; it may be called while users record.
func (t *tally) live() (ok, errs int64) {
	for _, r := range t.recs {
		ok += r.liveOK.Load()
		errs += r.liveErr.Load()
	}
	return ok, errs
}

// result merges what the users recorded. Call it once they have stopped.
func (t *tally) result() Result {
	merged := newHistogram()
	var res Result
	var sum, maxUS int64
	for _, r := range t.recs {
		r.flush()
		res.Requests += r.ok
		sum += r.sumUS
		maxUS = max(maxUS, r.maxUS)
		res.Errors.Status += r.errs.Status
		res.Errors.Timeout += r.errs.Timeout
		res.Errors.Connect += r.errs.Connect
	}
	for _, s := range t.shards {
		merged.Merge(s.h)
	}
	res.Window = t.win.end.Sub(t.win.start)
	if res.Window > 0 {
		res.RPS = float64(res.Requests) / res.Window.Seconds()
	}
	if res.Requests > 0 {
		// The mean and the max come from exact sums, not from the
		// histogram's buckets: the physics check divides by the mean.
		res.Mean = time.Duration((sum+res.Requests/2)/res.Requests) * time.Microsecond
		res.Max = time.Duration(maxUS) * time.Microsecond
		// The histogram answers with the top of a percentile's bucket,
		// which may lie above the exact maximum; no percentile can.
		pct := func(p float64) time.Duration {
			return min(time.Duration(merged.ValueAtPercentile(p))*time.Microsecond, res.Max)
		}
		res.P50, res.P95, res.P99 = pct(50), pct(95), pct(99)
	}
	return res
}

// recorder is one virtual user's account. Only its user writes it, so its
// counters are plain integers; liveOK and liveErr are atomic because the
// progress line reads them while the user runs.
type recorder struct {
	win   window
	shard *shard

	batch [batchSize]int64
	n     int

	ok, sumUS, maxUS int64
	errs             Errors

	liveOK, liveErr atomic.Int64
}

// record accounts for one request sent at sent that completed at done.
func (r *recorder) record(sent, done time.Time, k kind) {
	if k == kindOK {
		r.liveOK.Add(1)
	} else {
		r.liveErr.Add(1)
	}
	if !r.win.contains(done) {
		return
	}
	switch k {
	case kindOK:
		us := max(done.Sub(sent).Microseconds(), histMin)
		r.ok++
		r.sumUS += us
		r.maxUS = max(r.maxUS, us)
		r.batch[r.n] = min(us, histMax)
		r.n++
		if r.n == len(r.batch) {
			r.flush()
		}
	case kindStatus:
		r.errs.Status++
	case kindTimeout:
		r.errs.Timeout++
	default:
		r.errs.Connect++
	}
}

func (r *recorder) flush() {
	if r.n == 0 {
		return
	}
	r.shard.mu.Lock()
	for _, us := range r.batch[:r.n] {
		// Values are clamped to the histogram's range in record, so
		// RecordValue cannot fail.
		_ = r.shard.h.RecordValue(us)
	}
	r.shard.mu.Unlock()
	r.n = 0
}

// summary is the one-line account of a level for the progress stream.
func (r Result) summary() string {
	s := fmt.Sprintf("%.0f rps, mean %s, p50 %s, p99 %s, %d errors", r.RPS, fmtDur(r.Mean), fmtDur(r.P50), fmtDur(r.P99), r.Errors.Total())
	if sc := r.Sidecar; sc != nil && sc.Loomgate {
		s += fmt.Sprintf("; sidecar queue %s, service %s, peak in flight %d", fmtDur(sc.QueueWait), fmtDur(sc.Service), sc.PeakInFlight)
	}
	if r.Physics.Flagged {
		s += "; physics: " + r.Physics.Reason
	}
	return s
}

// fmtDur writes a latency the way people read them: 0.42 ms, 4.51 ms,
// 203 ms, 2.03 s.
func fmtDur(d time.Duration) string {
	ms := float64(d) / float64(time.Millisecond)
	switch {
	case ms < 0.005: // would print as 0.00
		return "0 ms"
	case ms < 10:
		return fmt.Sprintf("%.2f ms", ms)
	case ms < 1000:
		return fmt.Sprintf("%.0f ms", ms)
	case ms < 10000:
		return fmt.Sprintf("%.2f s", ms/1000)
	}
	return fmt.Sprintf("%.1f s", ms/1000)
}
