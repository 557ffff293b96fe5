package bench

import (
	"errors"
	"maps"
	"net"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
	"github.com/valyala/fasthttp"
)

// Recording is shared by both pacings: every request is recorded with the
// time it was due, sent and answered, and what it was answered with. The
// pacing decides only which requests belong to the window: a closed loop
// counts those that complete in it, whenever they were sent; an open loop
// those due in it, followed to their answer. (In a closed loop a request
// is due when it is sent.)

// window is the measurement window: [start, end). A request completing at
// end, cut there by its deadline, is not in it.
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

// batchSize is how many values a recorder keeps before folding them into a
// shared histogram.
//
// A histogram of this range and precision is 160 KiB; one per client would
// cost hundreds of MiB at thousands of clients, in the very process whose
// memory the memory scenario measures. So recorders share a few histograms
// and take a shard's lock once per batch, not once per request; an open
// loop may have thousands of recorders, each with two batches.
const batchSize = 64

// shard is a histogram shared by some of the recorders.
type shard struct {
	mu sync.Mutex
	h  *hdrhistogram.Histogram
}

func (s *shard) add(values []int64) {
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

// answer is what one request came back with.
type answer struct {
	status     int
	retryAfter int64 // seconds, from a Retry-After header; -1 if none
	err        error
}

// kind is what became of one request.
type kind uint8

const (
	kindOK      kind = iota // a 2xx response
	kindStatus              // any other response
	kindTimeout             // no response before the deadline
	kindConnect             // the connection failed: refused, reset, closed
)

func classify(err error, status int) kind {
	if err == nil {
		if status >= 200 && status < 300 {
			return kindOK
		}
		return kindStatus
	}
	if errors.Is(err, fasthttp.ErrTimeout) {
		return kindTimeout
	}
	// A dial that timed out never reached the server: a connect error.
	if errors.Is(err, fasthttp.ErrDialTimeout) {
		return kindConnect
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			return kindConnect
		}
		return kindTimeout
	}
	return kindConnect
}

// tally gathers what the recorders of one level recorded.
type tally struct {
	win window
	// byDue: requests belong to the window by their due time (open loop),
	// else by their completion (closed loop).
	byDue bool
	// latency and lag are the shared histograms; lag only by due time.
	latency, lag []*shard

	mu   sync.Mutex // guards recs, which an open loop grows as it runs
	recs []*recorder
}

// newTally is a tally for up to clients recorders at once.
func newTally(win window, byDue bool, clients int) *tally {
	n := max(min(clients, 2*runtime.GOMAXPROCS(0)), 1)
	t := &tally{win: win, byDue: byDue, latency: make([]*shard, n)}
	for i := range t.latency {
		t.latency[i] = &shard{h: newHistogram()}
	}
	if byDue {
		t.lag = make([]*shard, n)
		for i := range t.lag {
			t.lag[i] = &shard{h: newHistogram()}
		}
	}
	return t
}

// newRecorder is the account of one client (closed loop) or worker (open
// loop); only it writes it.
func (t *tally) newRecorder() *recorder {
	t.mu.Lock()
	defer t.mu.Unlock()
	i := len(t.recs)
	rec := &recorder{win: t.win, byDue: t.byDue, latency: t.latency[i%len(t.latency)]}
	if t.byDue {
		rec.lag = t.lag[i%len(t.lag)]
	}
	t.recs = append(t.recs, rec)
	return rec
}

// live returns the 2xx answers so far, window or not, and the other
// answers and failures; it may be called while recorders record.
func (t *tally) live() (ok, errs int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, r := range t.recs {
		ok += r.liveOK.Load()
		errs += r.liveErr.Load()
	}
	return ok, errs
}

// recorder is one client's account. Only its client writes it, so its
// counters are plain integers; liveOK and liveErr are atomic because the
// progress line reads them while it runs.
type recorder struct {
	win          window
	byDue        bool
	latency, lag *shard

	latBatch, lagBatch [batchSize]int64
	nLat, nLag         int

	// Of the requests in the window:
	counts       OpenCounts
	sent, late   int64
	sumUS        int64
	maxUS, lagUS int64           // the highest latency and lag
	retryFor     map[int64]int64 // Retry-After seconds → count

	// Whatever was due when: sentWin went out in the window, okWin were
	// answered 2xx in it.
	sentWin, okWin int64

	liveOK, liveErr atomic.Int64
}

// record accounts for one request due at due, sent at sent, answered (or
// given up) at done.
func (r *recorder) record(due, sent, done time.Time, a answer) {
	if errors.Is(a.err, fasthttp.ErrNoFreeConns) {
		if r.win.contains(due) {
			r.counts.NotSent++
		}
		return
	}
	k := classify(a.err, a.status)
	if k == kindOK {
		r.liveOK.Add(1)
	} else {
		r.liveErr.Add(1)
	}
	if r.win.contains(sent) {
		r.sentWin++
	}
	if k == kindOK && r.win.contains(done) {
		r.okWin++
	}
	belongs := done
	if r.byDue {
		belongs = due
	}
	if !r.win.contains(belongs) {
		return
	}
	r.sent++
	if r.byDue {
		lag := max(sent.Sub(due), 0)
		if lag > LateAfter {
			r.late++
		}
		us := min(lag.Microseconds(), histMax)
		r.lagUS = max(r.lagUS, us)
		r.lagBatch[r.nLag] = us
		if r.nLag++; r.nLag == batchSize {
			r.flushLag()
		}
	}
	switch k {
	case kindOK:
		r.counts.OK++
		us := max(done.Sub(due).Microseconds(), histMin)
		r.sumUS += us
		r.maxUS = max(r.maxUS, us)
		r.latBatch[r.nLat] = min(us, histMax)
		if r.nLat++; r.nLat == batchSize {
			r.flushLat()
		}
	case kindStatus:
		switch a.status {
		case fasthttp.StatusServiceUnavailable:
			r.counts.Unavailable++
			if a.retryAfter >= 0 {
				if r.retryFor == nil {
					r.retryFor = map[int64]int64{}
				}
				r.retryFor[a.retryAfter]++
			}
		case fasthttp.StatusGatewayTimeout:
			r.counts.GatewayTime++
		default:
			r.counts.OtherStatus++
		}
	case kindTimeout:
		r.counts.Timeouts++
	default:
		r.counts.Errors++
	}
}

func (r *recorder) flushLat() {
	r.latency.add(r.latBatch[:r.nLat])
	r.nLat = 0
}

func (r *recorder) flushLag() {
	if r.lag != nil {
		r.lag.add(r.lagBatch[:r.nLag])
	}
	r.nLag = 0
}

func (r *recorder) flush() {
	r.flushLat()
	r.flushLag()
}

// totals is what the recorders of a level recorded, merged.
type totals struct {
	win                        time.Duration
	counts                     OpenCounts
	sent, late, sentWin, okWin int64
	sumUS                      int64
	max, maxLag                time.Duration
	latency, lag               *hdrhistogram.Histogram
	retryFor                   map[int64]int64
}

// totals merges the recorders' accounts. Call it once they have stopped.
func (t *tally) totals() totals {
	t.mu.Lock()
	defer t.mu.Unlock()
	tt := totals{win: t.win.end.Sub(t.win.start), latency: newHistogram(), lag: newHistogram(), retryFor: map[int64]int64{}}
	var maxUS, lagUS int64
	for _, r := range t.recs {
		r.flush()
		c := r.counts
		tt.counts.OK += c.OK
		tt.counts.Unavailable += c.Unavailable
		tt.counts.GatewayTime += c.GatewayTime
		tt.counts.OtherStatus += c.OtherStatus
		tt.counts.Errors += c.Errors
		tt.counts.Timeouts += c.Timeouts
		tt.counts.NotSent += c.NotSent
		tt.sent += r.sent
		tt.late += r.late
		tt.sentWin += r.sentWin
		tt.okWin += r.okWin
		tt.sumUS += r.sumUS
		maxUS, lagUS = max(maxUS, r.maxUS), max(lagUS, r.lagUS)
		for s, n := range r.retryFor {
			tt.retryFor[s] += n
		}
	}
	for _, s := range t.latency {
		tt.latency.Merge(s.h)
	}
	for _, s := range t.lag {
		tt.lag.Merge(s.h)
	}
	tt.max, tt.maxLag = time.Duration(maxUS)*time.Microsecond, time.Duration(lagUS)*time.Microsecond
	return tt
}

// perSecond is n per second of the window, 0 for an empty window.
func (tt totals) perSecond(n int64) float64 {
	if tt.win <= 0 {
		return 0
	}
	return float64(n) / tt.win.Seconds()
}

// result is a closed loop's Result: the requests completed in the window.
func (t *tally) result() Result {
	tt := t.totals()
	c := tt.counts
	res := Result{
		Window:   tt.win,
		Requests: c.OK,
		RPS:      tt.perSecond(c.OK),
		Errors:   Errors{Status: c.Unavailable + c.GatewayTime + c.OtherStatus, Timeout: c.Timeouts, Connect: c.Errors},
	}
	if res.Requests > 0 {
		// The mean and the max come from exact sums, not from the
		// histogram's buckets: the physics check divides by the mean.
		res.Mean = time.Duration((tt.sumUS+res.Requests/2)/res.Requests) * time.Microsecond
		res.Max = tt.max
		res.P50, res.P95, res.P99 = pctOf(tt.latency, 50, res.Max), pctOf(tt.latency, 95, res.Max), pctOf(tt.latency, 99, res.Max)
	}
	return res
}

// openResult is an open loop's result: the requests due in the window.
func (t *tally) openResult() OpenResult {
	tt := t.totals()
	res := OpenResult{
		Window:     tt.win,
		Counts:     tt.counts,
		Sent:       tt.sent,
		Late:       tt.late,
		SendRate:   tt.perSecond(tt.sentWin),
		Throughput: tt.perSecond(tt.okWin),
		Max:        tt.max,
		SendLagMax: tt.maxLag,
		RetryAfter: retryAfterOf(tt.retryFor),
	}
	res.P50, res.P90, res.P99 = pctOf(tt.latency, 50, res.Max), pctOf(tt.latency, 90, res.Max), pctOf(tt.latency, 99, res.Max)
	res.SendLagP99 = pctOf(tt.lag, 99, res.SendLagMax)
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
