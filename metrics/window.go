package metrics

import (
	"math"
	"sync"
	"time"
)

// The window's geometry. Figures are computed over the last minute, which
// is long enough to smooth one slow request away and short enough to follow
// a change of load; 5 s buckets let it slide in steps a person can follow
// on a status page.
const (
	// BucketWidth is the window's resolution.
	BucketWidth = 5 * time.Second
	// WindowBuckets is the window's length in buckets: 60 s.
	WindowBuckets = 12
	// Window is the span the figures cover once traffic has run that long.
	Window = WindowBuckets * BucketWidth
	// UnloadedHorizon is how far back the unloaded service time is looked
	// for: longer than the window, because an upstream saturated for the
	// whole window never shows its unloaded time within it.
	UnloadedHorizon = 15 * time.Minute
	unloadedBuckets = int64(UnloadedHorizon / BucketWidth)
)

// maxMemoryPoints bounds the memory readings kept for the fit: one per
// scrape in the window, at the shortest interval worth using.
const maxMemoryPoints = 256

// bucket holds what happened in one BucketWidth of time.
type bucket struct {
	n int64 // bucket number since the window's epoch; -1 for never used

	arrivals  int64 // finished requests that reached admission
	rejected  int64 // of which not admitted
	completed int64 // finished requests that were admitted
	queueSum  time.Duration
	service   time.Duration // sum
	queueHist [numBuckets]uint32
	servHist  [numBuckets]uint32

	// Admission state read by the sampler.
	samples, inFlightSum, queuedSum int64
}

// windowBounds are the window's own histogram bounds, in seconds: from
// 100µs to past 60s, each 2^(1/8) (about 9%) above the last. The classic
// buckets are too coarse for a status page: a steady 200 ms falls between
// 0.1 and 0.25 and would read as a p50 of 175 ms; here a quantile is off
// by at most one bucket, 9%.
var windowBounds = func() [numBuckets - 1]float64 {
	var b [numBuckets - 1]float64
	for i := range b {
		b[i] = windowMin * math.Exp2(float64(i)/windowSteps)
	}
	return b
}()

const (
	windowMin   = 100e-6 // seconds
	windowSteps = 8      // bounds per doubling
	// numBuckets covers 100µs to 60s (2^19.2 of range) in 1/8-doublings,
	// +Inf included.
	numBuckets = 156
)

// minBucket is the lowest service time of successful requests in one
// BucketWidth, kept for UnloadedHorizon.
type minBucket struct {
	n   int64
	min time.Duration // 0 when none
}

// memoryPoint is one reading of the upstream's memory, with the in-flight
// requests averaged since the previous reading.
type memoryPoint struct {
	at       time.Time
	inFlight float64
	bytes    float64
}

// window keeps the sliding window of figures. Record and the sampler feed
// it; every method takes the time, so that tests give exact series.
type window struct {
	mu    sync.Mutex
	epoch time.Time // bucket n covers [epoch+n*BucketWidth, epoch+(n+1)*BucketWidth)
	// first is the moment traffic was first seen; before it there is
	// nothing to average, and idle time would only dilute the rates.
	first time.Time

	buckets [WindowBuckets]bucket
	mins    [unloadedBuckets]minBucket

	// In-flight samples since the previous memory reading.
	sinceReadingSum, sinceReadingCount int64
	points                             []memoryPoint
	memory                             float64 // last reading
	memoryRead                         bool
	// bytesPerRequest is the slope of the last usable fit, 0 before one.
	bytesPerRequest float64
}

func newWindow(epoch time.Time) *window {
	w := &window{epoch: epoch, points: make([]memoryPoint, 0, maxMemoryPoints)}
	for i := range w.buckets {
		w.buckets[i].n = -1
	}
	for i := range w.mins {
		w.mins[i].n = -1
	}
	return w
}

// bucketNumber is the number of the bucket that holds t.
func (w *window) bucketNumber(t time.Time) int64 {
	d := t.Sub(w.epoch)
	if d < 0 {
		return 0
	}
	return int64(d / BucketWidth)
}

// current returns bucket n, emptied if its slot last held an older one,
// or nil if the slot already holds a newer one: an event stamped before
// taking the lock and delayed by a whole window must not wipe out the
// present. The caller holds w.mu.
func (w *window) current(n int64) *bucket {
	b := &w.buckets[n%WindowBuckets]
	if b.n > n {
		return nil
	}
	if b.n != n {
		*b = bucket{n: n}
	}
	return b
}

// record adds one finished request at now. It allocates nothing: Record
// calls it on every request.
func (w *window) record(now time.Time, s *Sample) {
	if !s.Admission {
		return // a bad request never met admission; it tells nothing here
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.first.IsZero() {
		w.first = now.Add(-s.Total)
		if w.first.Before(w.epoch) {
			w.first = w.epoch
		}
	}
	n := w.bucketNumber(now)
	b := w.current(n)
	if b == nil {
		return
	}
	b.arrivals++
	b.queueSum += s.Queue
	b.queueHist[bucketIndex(s.Queue)]++
	if !s.Admitted {
		b.rejected++
		return
	}
	b.completed++
	b.service += s.Service
	b.servHist[bucketIndex(s.Service)]++
	// Only answers the upstream gave in full count towards its unloaded
	// time: a refused connection or a quick 503 says nothing of the work.
	if s.Outcome == "ok" && s.UpstreamStatus < 500 && s.Service > 0 {
		m := &w.mins[n%unloadedBuckets]
		if m.n > n {
			return
		}
		if m.n != n {
			*m = minBucket{n: n}
		}
		if m.min == 0 || s.Service < m.min {
			m.min = s.Service
		}
	}
}

// sample adds one reading of the admission state at now.
func (w *window) sample(now time.Time, inFlight, queued int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.first.IsZero() {
		if inFlight+queued == 0 {
			return
		}
		w.first = now
	}
	b := w.current(w.bucketNumber(now))
	if b == nil {
		return
	}
	b.samples++
	b.inFlightSum += inFlight
	b.queuedSum += queued
	w.sinceReadingSum += inFlight
	w.sinceReadingCount++
}

// bucketIndex is the window histogram's bucket of d: the first whose upper
// bound is at least d, or the +Inf bucket. It computes the index rather
// than searching 155 bounds, then corrects the floating-point edge.
func bucketIndex(d time.Duration) int {
	s := d.Seconds()
	if s <= windowMin {
		return 0
	}
	i := int(math.Ceil(math.Log2(s/windowMin) * windowSteps))
	if i >= len(windowBounds) {
		return len(windowBounds)
	}
	if i > 0 && s <= windowBounds[i-1] {
		i--
	} else if s > windowBounds[i] {
		i++
	}
	return i
}

// span returns the start of the window at now and the time it covers: the
// last WindowBuckets buckets, the current one partly, or less when traffic
// began more recently.
func (w *window) span(now time.Time) (from int64, start time.Time, d time.Duration) {
	cur := w.bucketNumber(now)
	from = max(cur-WindowBuckets+1, 0)
	start = w.epoch.Add(time.Duration(from) * BucketWidth)
	if w.first.IsZero() {
		return from, now, 0
	}
	if w.first.After(start) {
		start = w.first
	}
	return from, start, max(now.Sub(start), 0)
}

// totals sums the buckets in [from, cur].
type totals struct {
	arrivals, rejected, completed int64
	queueSum, service             time.Duration
	queueHist, servHist           [numBuckets]uint64
	samples, inFlightSum, queued  int64
}

func (t *totals) add(b *bucket) {
	t.arrivals += b.arrivals
	t.rejected += b.rejected
	t.completed += b.completed
	t.queueSum += b.queueSum
	t.service += b.service
	for i := range b.queueHist {
		t.queueHist[i] += uint64(b.queueHist[i])
		t.servHist[i] += uint64(b.servHist[i])
	}
	t.samples += b.samples
	t.inFlightSum += b.inFlightSum
	t.queued += b.queuedSum
}

// figures computes the window's figures at now. The caller adds what needs
// the configuration (capacity, saturation) with estimate.
func (w *window) figures(now time.Time) Figures {
	w.mu.Lock()
	defer w.mu.Unlock()
	from, _, d := w.span(now)
	cur := w.bucketNumber(now)
	var t totals
	for n := from; n <= cur; n++ {
		if b := &w.buckets[n%WindowBuckets]; b.n == n {
			t.add(b)
		}
	}
	f := Figures{
		Span:     d,
		Requests: t.completed,
		Rejected: t.rejected,
	}
	if d > 0 {
		f.ArrivalRate = float64(t.arrivals) / d.Seconds()
		f.Throughput = float64(t.completed) / d.Seconds()
	}
	if t.samples > 0 {
		f.InFlight = float64(t.inFlightSum) / float64(t.samples)
		f.Queued = float64(t.queued) / float64(t.samples)
	}
	if t.arrivals > 0 {
		f.MeanQueue = t.queueSum / time.Duration(t.arrivals)
		f.QueueP50 = seconds(quantile(0.5, windowBounds[:], t.queueHist[:]))
		f.QueueP99 = seconds(quantile(0.99, windowBounds[:], t.queueHist[:]))
	}
	if t.completed > 0 {
		f.MeanService = t.service / time.Duration(t.completed)
		f.ServiceP50 = seconds(quantile(0.5, windowBounds[:], t.servHist[:]))
		f.ServiceP99 = seconds(quantile(0.99, windowBounds[:], t.servHist[:]))
	}
	if total := t.queueSum + t.service; total > 0 {
		f.QueueShare = float64(t.queueSum) / float64(total)
	}
	for n := max(cur-unloadedBuckets+1, 0); n <= cur; n++ {
		if m := &w.mins[n%unloadedBuckets]; m.n == n && m.min > 0 && (f.UnloadedService == 0 || m.min < f.UnloadedService) {
			f.UnloadedService = m.min
		}
	}
	if w.memoryRead {
		f.UpstreamMemoryBytes = w.memory
	}
	f.BytesPerRequest = w.bytesPerRequest
	estimate(&f)
	return f
}

// meanService is the window's mean service time at now, without the rest
// of the figures: Retry-After asks for it on every rejection.
func (w *window) meanService(now time.Time) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	from, _, _ := w.span(now)
	var sum time.Duration
	var n int64
	for i := from; i <= w.bucketNumber(now); i++ {
		if b := &w.buckets[i%WindowBuckets]; b.n == i {
			sum += b.service
			n += b.completed
		}
	}
	if n == 0 {
		return 0
	}
	return sum / time.Duration(n)
}

// BucketFigures is one bucket of the window's history.
type BucketFigures struct {
	// Start is the bucket's start, or when traffic began if later.
	Start time.Time
	// Span is the time the bucket covers, less than BucketWidth for the
	// current one and the one in which traffic began.
	Span time.Duration
	// Throughput is admitted requests finished per second.
	Throughput float64
	// MeanQueue and MeanService are the means over the bucket's requests.
	MeanQueue, MeanService time.Duration
	// InFlight and Queued are time averages, from the sampler.
	InFlight, Queued float64
}

// history returns the window's buckets, oldest first, from the one in
// which traffic began.
func (w *window) history(now time.Time) []BucketFigures {
	w.mu.Lock()
	defer w.mu.Unlock()
	from, _, _ := w.span(now)
	cur := w.bucketNumber(now)
	if w.first.IsZero() {
		return nil
	}
	var out []BucketFigures
	for n := from; n <= cur; n++ {
		start := w.epoch.Add(time.Duration(n) * BucketWidth)
		end := start.Add(BucketWidth)
		if end.Before(w.first) || end.Equal(w.first) {
			continue
		}
		if start.Before(w.first) {
			start = w.first
		}
		if end.After(now) {
			end = now
		}
		bf := BucketFigures{Start: start, Span: max(end.Sub(start), 0)}
		if b := &w.buckets[n%WindowBuckets]; b.n == n {
			if bf.Span > 0 {
				bf.Throughput = float64(b.completed) / bf.Span.Seconds()
			}
			if b.arrivals > 0 {
				bf.MeanQueue = b.queueSum / time.Duration(b.arrivals)
			}
			if b.completed > 0 {
				bf.MeanService = b.service / time.Duration(b.completed)
			}
			if b.samples > 0 {
				bf.InFlight = float64(b.inFlightSum) / float64(b.samples)
				bf.Queued = float64(b.queuedSum) / float64(b.samples)
			}
		}
		out = append(out, bf)
	}
	return out
}

// quantile estimates the q-quantile from histogram bucket counts the way
// Prometheus's histogram_quantile does: find the bucket holding the
// rank and interpolate linearly inside it, the first bucket starting at 0;
// a rank in the +Inf bucket answers the highest finite bound. counts has
// one more entry than bounds (the +Inf bucket) and is not cumulative. It
// returns NaN when there are no observations.
func quantile(q float64, bounds []float64, counts []uint64) float64 {
	var total uint64
	for _, c := range counts {
		total += c
	}
	if total == 0 || math.IsNaN(q) {
		return math.NaN()
	}
	rank := min(max(q, 0), 1) * float64(total)
	var below uint64 // observations in the buckets before i
	for i, c := range counts {
		// The first non-empty bucket that reaches the rank: a rank of 0
		// (q = 0) must not stop in an empty first bucket.
		if c == 0 || float64(below+c) < rank {
			below += c
			continue
		}
		if i == len(bounds) {
			return bounds[len(bounds)-1]
		}
		lower := 0.0
		if i > 0 {
			lower = bounds[i-1]
		}
		return lower + (bounds[i]-lower)*(rank-float64(below))/float64(c)
	}
	return bounds[len(bounds)-1] // not reached: the last non-empty bucket reaches any rank
}

// seconds converts a float number of seconds to a Duration; NaN is 0.
func seconds(s float64) time.Duration {
	if math.IsNaN(s) {
		return 0
	}
	return time.Duration(s * float64(time.Second))
}
