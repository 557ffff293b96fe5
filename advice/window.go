package advice

import (
	"github.com/loomgate/loomgate/advice/hist"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/loomgate/loomgate/internal/outcome"
	"github.com/loomgate/loomgate/route"
)

// The window's geometry. Figures are computed over the last minute, which
// is long enough to smooth one slow request away and short enough to follow
// a change of load; 5 s buckets let it slide in steps a person can follow
// on a status page. The estimate looks further back, over History: how the
// upstream answered at other levels of load is what tells saturation from a
// slow minute.
const (
	// BucketWidth is the window's resolution.
	BucketWidth = 5 * time.Second
	// WindowBuckets is the window's length in buckets: 60 s.
	WindowBuckets = 12
	// Window is the span the figures cover once traffic has run that long.
	Window = WindowBuckets * BucketWidth
	// History is how far back the estimate compares load and service time.
	History        = 15 * time.Minute
	historyBuckets = int64(History / BucketWidth)
	// classes is the route classes' slots: route.Other and route.Max more.
	classes = route.Max + 1
	// subBuckets is a bucket's seconds. Where the load changed within a
	// bucket, its calm seconds are read apart from the rest: a calm phase
	// shorter than a bucket is still a baseline, and a bucket that mixed it
	// with an overload is not.
	subBuckets = int(BucketWidth / time.Second)
)

// classTotals is one route class's part of a bucket. Only answers the
// upstream gave in full count: a refused connection or a quick 503 says
// nothing of the work.
type classTotals struct {
	n       int64
	service time.Duration // sum
}

// bucket holds what happened in one BucketWidth of time, for History.
type bucket struct {
	n int64 // bucket number since the window's epoch; -1 for never used

	arrivals  int64 // finished requests that reached admission
	rejected  int64 // of which not admitted
	completed int64 // finished requests that were admitted
	failed    int64 // of which the upstream failed (see upstreamFailed)
	queueSum  time.Duration
	service   time.Duration // sum, of every admitted request

	// Admission state read by the sampler.
	samples, inFlightSum, queuedSum int64

	class [classes]classTotals
	// p25, p50 and p99 are each class's quantiles of service time, kept
	// once the bucket leaves the live window and its histograms are reused.
	p25, p50, p99 [classes]time.Duration
	// The same for the bucket's calm part, when the load changed within it.
	mixed    bool
	calmLoad float64
	calm     [classes]calmClass
	// probed: a probe capped admission during the bucket. Its load and
	// service times are the probe's doing, read from its steps instead,
	// and the estimate leaves the bucket out.
	probed bool
	// lastLoad is the load of the bucket's last second, kept with its
	// summary for the next bucket's drain (see draining); drained is set
	// once summarised if the bucket held one.
	lastLoad float64
	drained  bool
}

// calmClass is one class's answers in the calm seconds of a mixed bucket,
// in microseconds to keep History small.
type calmClass struct {
	n uint32
	// unresolved: the class answered in the calm seconds, but which of the
	// bucket's answers they were cannot be told.
	unresolved          bool
	mean, p25, p50, p99 uint32
	x                   float32 // answers per second in the calm seconds
}

// second is one second of a live bucket: the sampler's readings and each
// class's answers.
type second struct {
	samples, inFlightSum int64
	class                [classes]classTotals
}

// live holds a bucket's histograms, for the buckets of the last Window.
type live struct {
	n         int64
	queueHist [hist.Buckets]uint32
	servHist  [hist.Buckets]uint32
	totalHist [hist.Buckets]uint32 // queue + service, of admitted requests
	classHist [classes][hist.Buckets]uint32
	sec       [subBuckets]second
}

// window keeps the sliding window. Record and the sampler feed it; every
// method takes the time, so that tests give exact series.
type window struct {
	mu    sync.Mutex
	epoch time.Time // bucket n covers [epoch+n*BucketWidth, epoch+(n+1)*BucketWidth)
	// first is the moment traffic was first seen; before it there is
	// nothing to average, and idle time would only dilute the rates.
	first time.Time

	buckets [historyBuckets]bucket
	live    [WindowBuckets]live

	// probing is set while a probe caps admission: the buckets it touches
	// are marked probed. step, while a probe's step is measured, holds its
	// answers; steps are the steps kept as baselines, oldest first, each
	// for History.
	probing bool
	step    *stepAnswers
	steps   []stepPoint
}

// stepAnswers are the answers of a probe's step, by class.
type stepAnswers struct {
	begin time.Time
	class [classes]classTotals
	hist  [classes][hist.Buckets]uint32
}

// stepPoint is a probe's step kept as a baseline: the upstream's speed
// at a load below its knee.
type stepPoint struct {
	at time.Time
	p  point
}

// maxSteps bounds the steps kept: a probe keeps one, and a probe comes
// once in minutes at most.
const maxSteps = 16

func newWindow(epoch time.Time) *window {
	w := &window{epoch: epoch}
	for i := range w.buckets {
		w.buckets[i].n = -1
	}
	for i := range w.live {
		w.live[i].n = -1
	}
	return w
}

// bucketNumber is the number of the bucket that holds t.
func (w *window) bucketNumber(t time.Time) int64 {
	n, _ := w.position(t)
	return n
}

// position is the bucket that holds t and the second of it. BucketWidth
// is whole seconds, so the seconds since the epoch give both with one
// division of the clock's nanoseconds: it runs for every request.
func (w *window) position(t time.Time) (int64, int) {
	d := t.Sub(w.epoch)
	if d < 0 {
		return 0, 0
	}
	s := int64(d / time.Second)
	n := s / int64(subBuckets)
	return n, int(s - n*int64(subBuckets))
}

// current returns bucket n and its histograms, emptied if their slots last
// held older ones, or nil if a slot already holds a newer one: an event
// stamped before taking the lock and delayed by a whole window must not
// wipe out the present. The caller holds w.mu.
func (w *window) current(n int64) (*bucket, *live) {
	b := &w.buckets[n%historyBuckets]
	l := &w.live[n%WindowBuckets]
	if b.n > n || l.n > n {
		return nil, nil
	}
	if l.n != n {
		// The histograms' previous bucket leaves the live window: keep
		// what the estimate needs of them.
		if l.n >= 0 {
			if old := &w.buckets[l.n%historyBuckets]; old.n == l.n {
				summarise(old, l, w.rampSeconds(l.n), w.lastLoad(l.n-1))
			}
		}
		*l = live{n: n}
	}
	if b.n != n {
		*b = bucket{n: n}
	}
	return b, l
}

// summarise keeps the class quartiles of b from its histograms, and its
// calm part's, and whether it held a drain after a load of before in the
// second before it.
func summarise(b *bucket, l *live, ramp int, before float64) {
	b.drained = draining(l, before)
	b.lastLoad = secondLoad(&l.sec[subBuckets-1])
	for c := range b.class {
		if b.class[c].n > 0 {
			b.p25[c] = hist.Duration(hist.Quantile(0.25, hist.Bounds[:], l.classHist[c][:]))
			b.p50[c] = hist.Duration(hist.Quantile(0.5, hist.Bounds[:], l.classHist[c][:]))
			b.p99[c] = hist.Duration(hist.Quantile(0.99, hist.Bounds[:], l.classHist[c][:]))
		}
	}
	var calm [classes]classPoint
	b.mixed, b.calmLoad = calmPart(b, l, ramp, &calm)
	for c := range calm {
		cp := calm[c]
		b.calm[c] = calmClass{n: uint32(min(cp.n, math.MaxUint32)), unresolved: cp.unresolved,
			mean: micros(cp.mean), p25: micros(cp.p25), p50: micros(cp.p50), p99: micros(cp.p99), x: float32(cp.x)}
	}
}

// A transition is not a calmer load. Where the load falls (a peak ends,
// a burst of clients stops), the requests answered in the seconds after
// were admitted before, at the load that fell, and took as long as it
// made them: beside the lower load they would read as an upstream that
// does not slow down. drainFall is how far a second's load must fall from
// the second before it, and drainLeast by how many requests, and
// drainService how long its answers must have taken on average, for the
// second to hold a drain: a tenth or more of them admitted before the
// fall.
const (
	drainFall    = LoadRise
	drainLeast   = 4
	drainService = 100 * time.Millisecond
)

// draining reports whether a second of l holds a drain (see drainFall),
// before being the load of the second before l's first.
func draining(l *live, before float64) bool {
	prev := before
	for i := range l.sec {
		s := &l.sec[i]
		load := secondLoad(s)
		var t classTotals
		for c := range s.class {
			t.n += s.class[c].n
			t.service += s.class[c].service
		}
		if prev >= drainFall*load && prev-load >= drainLeast && t.n > 0 && t.service/time.Duration(t.n) >= drainService {
			return true
		}
		prev = load
	}
	return false
}

// secondLoad is a second's requests in flight, on average over its
// samples, or by Little's law on its answers where the sampler did not
// run.
func secondLoad(s *second) float64 {
	if s.samples > 0 {
		return float64(s.inFlightSum) / float64(s.samples)
	}
	var busy time.Duration
	for c := range s.class {
		busy += s.class[c].service
	}
	return busy.Seconds()
}

// lastLoad is the load of bucket n's last second, 0 where it is not
// known. The caller holds w.mu.
func (w *window) lastLoad(n int64) float64 {
	if n < 0 {
		return 0
	}
	if l := &w.live[n%WindowBuckets]; l.n == n {
		return secondLoad(&l.sec[subBuckets-1])
	}
	if b := &w.buckets[n%historyBuckets]; b.n == n {
		return b.lastLoad
	}
	return 0
}

// drained reports whether bucket b, number n, held a drain (see
// draining). The caller holds w.mu.
func (w *window) drained(n int64, b *bucket) bool {
	if l := &w.live[n%WindowBuckets]; l.n == n {
		return draining(l, w.lastLoad(n-1))
	}
	return b.drained
}

func micros(d time.Duration) uint32 { return uint32(min(max(d.Microseconds(), 0), math.MaxUint32)) }

// calmTolerance is how near the calm seconds' mean service time must be to
// the mean of the bucket's quickest answers, or of all of them, for their
// quantiles to be read from the bucket's histogram: the histogram's bins
// are 9% wide.
const calmTolerance = 0.15

// calmPart reads the seconds of a bucket in which the load was least, when
// it changed within the bucket by LoadRise or more: their load, and each
// class's answers in them into calm. A bucket's histogram is not kept by
// the second, so the calm answers' quantiles are read from it where the
// calm seconds' mean tells which answers they were: the quickest of the
// bucket (the load stretched the rest) or a fair share of all of them (it
// did not). Where it tells neither, the class is unresolved.
//
// Its answers a second are of its calm seconds after the first ramp of
// the bucket: the second traffic began in is the traffic starting (open
// arrivals hold few requests in it, and answer fewer only for want of
// requests to answer yet), and what it serves there says nothing of a
// knee.
func calmPart(b *bucket, l *live, ramp int, calm *[classes]classPoint) (mixed bool, load float64) {
	var loads [subBuckets]float64
	var has [subBuckets]bool
	lo, hi := math.Inf(1), 0.0
	for i := range l.sec {
		s := &l.sec[i]
		switch {
		case s.samples > 0:
			loads[i] = float64(s.inFlightSum) / float64(s.samples)
		default:
			var busy time.Duration
			for c := range s.class {
				busy += s.class[c].service
			}
			loads[i] = busy.Seconds()
		}
		// An idle second is no calm part: traffic in bursts would make
		// every bucket mixed, and none a baseline.
		if loads[i] == 0 {
			continue
		}
		has[i] = true
		lo, hi = min(lo, loads[i]), max(hi, loads[i])
	}
	if hi < LoadRise*lo || hi-lo < 1 {
		return false, 0
	}
	var calmSecs [subBuckets]bool
	count := 0
	for i := range loads {
		if has[i] && loads[i] <= Unstretched*lo {
			calmSecs[i] = true
			load += loads[i]
			count++
		}
	}
	load /= float64(count)
	// A change of load is a step: the calm seconds at one end of the
	// bucket, the rest at the other. Calm seconds on both sides of busy
	// ones are bursts in a load that fluctuates, and the bucket is whole.
	changes, prev := 0, -1
	for i := range loads {
		if !has[i] {
			continue
		}
		if prev >= 0 && calmSecs[i] != calmSecs[prev] {
			changes++
		}
		prev = i
	}
	if changes != 1 {
		return false, 0
	}
	for c := range calm {
		var t classTotals
		var settled int64 // answers in calm seconds past the ramp
		settledSecs := 0
		for i := range l.sec {
			if calmSecs[i] {
				t.n += l.sec[i].class[c].n
				t.service += l.sec[i].class[c].service
				if i >= ramp {
					settled += l.sec[i].class[c].n
					settledSecs++
				}
			}
		}
		all := b.class[c]
		if t.n < minClassRequests || all.n == 0 {
			continue
		}
		share := float64(t.n) / float64(all.n)
		mean := t.service.Seconds() / float64(t.n)
		quickest := lowestMean(l.classHist[c][:], share)
		whole := all.service.Seconds() / float64(all.n)
		dq, dw := math.Abs(mean-quickest)/mean, math.Abs(mean-whole)/mean
		cp := classPoint{n: t.n, mean: t.service / time.Duration(t.n)}
		if settledSecs > 0 {
			cp.x = float64(settled) / float64(settledSecs)
		}
		switch {
		case min(dq, dw) > calmTolerance:
			cp.unresolved = true
		case dq <= dw:
			cp.p25 = hist.Duration(hist.Quantile(0.25*share, hist.Bounds[:], l.classHist[c][:]))
			cp.p50 = hist.Duration(hist.Quantile(0.5*share, hist.Bounds[:], l.classHist[c][:]))
			cp.p99 = hist.Duration(hist.Quantile(0.99*share, hist.Bounds[:], l.classHist[c][:]))
		default:
			cp.p25 = hist.Duration(hist.Quantile(0.25, hist.Bounds[:], l.classHist[c][:]))
			cp.p50 = hist.Duration(hist.Quantile(0.5, hist.Bounds[:], l.classHist[c][:]))
			cp.p99 = hist.Duration(hist.Quantile(0.99, hist.Bounds[:], l.classHist[c][:]))
		}
		calm[c] = cp
	}
	return true, load
}

// lowestMean is the mean, in seconds, of the quickest share of the
// observations in a window histogram, each bin counted at its middle.
func lowestMean(counts []uint32, share float64) float64 {
	var total uint64
	for _, c := range counts {
		total += uint64(c)
	}
	want := share * float64(total)
	if want <= 0 {
		return math.NaN()
	}
	taken, sum := 0.0, 0.0
	for i, c := range counts {
		if c == 0 {
			continue
		}
		lower, upper := 0.0, hist.Bounds[len(hist.Bounds)-1]
		if i > 0 {
			lower = hist.Bounds[i-1]
		}
		if i < len(hist.Bounds) {
			upper = hist.Bounds[i]
		}
		k := min(float64(c), want-taken)
		sum += k * (lower + upper) / 2
		taken += k
		if taken >= want {
			break
		}
	}
	return sum / taken
}

// Record adds one finished request, at its End (the clock is read only if
// End is zero), in its route class (o.Class, an index of Routes, which the
// proxy classified it into as it met admission). It does not allocate.
func (a *Advisor) Record(o *outcome.Record) {
	if !o.Admission {
		return
	}
	now := o.End
	if now.IsZero() {
		now = time.Now()
	}
	a.window.record(now, o.Class, o)
}

// record adds one finished request at now, in class. It allocates
// nothing: it is called on every request.
func (w *window) record(now time.Time, class int, s *outcome.Record) {
	if !s.Admission {
		return // a bad request never met admission; it tells nothing here
	}
	// The indexes and the bucket's position are computed before the lock,
	// to keep it short: every request takes it.
	qi, si, ti := hist.Index(s.Queue), hist.Index(s.Service), 0
	if s.Queue == 0 {
		// Admitted at once, as most requests are without a limit: the
		// total is the service time, and its logarithm is taken once.
		ti = si
	} else {
		ti = hist.Index(s.Queue + s.Service)
	}
	n, sec := w.position(now)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.first.IsZero() {
		w.first = now.Add(-s.Queue - s.Service)
		if w.first.Before(w.epoch) {
			w.first = w.epoch
		}
	}
	b, l := w.current(n)
	if b == nil {
		return
	}
	if w.probing {
		b.probed = true
	}
	if st := w.step; st != nil && s.Admitted && s.Answered() && class >= 0 && class < classes && now.After(st.begin) {
		st.class[class].n++
		st.class[class].service += s.Service
		st.hist[class][si]++
	}
	b.arrivals++
	b.queueSum += s.Queue
	l.queueHist[qi]++
	if !s.Admitted {
		// A client that left while queued was not refused: it is an
		// arrival, not a rejection.
		if s.Kind.Rejection() {
			b.rejected++
		}
		return
	}
	b.completed++
	b.service += s.Service
	if upstreamFailed(s) {
		b.failed++
	}
	l.servHist[si]++
	l.totalHist[ti]++
	if s.Answered() && class >= 0 && class < classes {
		t, st := &b.class[class], &l.sec[sec].class[class]
		t.n++
		t.service += s.Service
		st.n++
		st.service += s.Service
		l.classHist[class][si]++
	}
}

// upstreamFailed says whether the upstream failed an admitted request: no
// answer (refused, reset, past UPSTREAM_TIMEOUT) or a 5xx of its own.
func upstreamFailed(s *outcome.Record) bool {
	switch s.Kind {
	case outcome.UpstreamError, outcome.UpstreamTimeout:
		return true
	case outcome.OK:
		return s.UpstreamStatus >= 500
	}
	return false
}

// sample adds one reading of the admission state at now, and reports
// whether it counted: not before traffic began.
func (w *window) sample(now time.Time, inFlight, queued int64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.first.IsZero() {
		if inFlight+queued == 0 {
			return false
		}
		w.first = now
	}
	n, sec := w.position(now)
	b, l := w.current(n)
	if b == nil {
		return false
	}
	if w.probing {
		b.probed = true
	}
	b.samples++
	b.inFlightSum += inFlight
	b.queuedSum += queued
	l.sec[sec].samples++
	l.sec[sec].inFlightSum += inFlight
	return true
}

// setProbing marks the buckets from now, until it is unset, as a probe's.
func (w *window) setProbing(now time.Time, on bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.probing = on
	if b, _ := w.current(w.bucketNumber(now)); b != nil {
		b.probed = true
	}
}

// beginStep starts reading the answers of a probe's step apart, from now.
func (w *window) beginStep(now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.step == nil {
		w.step = new(stepAnswers)
	}
	*w.step = stepAnswers{begin: now}
}

// endStep ends a step begun at beginStep. With keep, its answers become a
// point the estimate takes for History: the upstream at load, below its
// knee. Where no class answered often enough, nothing is kept.
func (w *window) endStep(now time.Time, load float64, keep bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	st := w.step
	w.step = nil
	if st == nil || !keep || load <= 0 || !now.After(st.begin) {
		return
	}
	d := now.Sub(st.begin)
	p := point{load: load, span: d, probed: true}
	enough := false
	for c := range st.class {
		t := st.class[c]
		if t.n == 0 {
			continue
		}
		enough = enough || t.n >= minClassRequests
		p.class[c] = classPoint{n: t.n, mean: t.service / time.Duration(t.n), x: float64(t.n) / d.Seconds(),
			p25: hist.Duration(hist.Quantile(0.25, hist.Bounds[:], st.hist[c][:])),
			p50: hist.Duration(hist.Quantile(0.5, hist.Bounds[:], st.hist[c][:])),
			p99: hist.Duration(hist.Quantile(0.99, hist.Bounds[:], st.hist[c][:]))}
	}
	if !enough {
		return
	}
	if len(w.steps) == maxSteps {
		w.steps = slices.Delete(w.steps, 0, 1)
	}
	w.steps = append(w.steps, stepPoint{at: now, p: p})
}

// rampTime is how long from the first traffic seen its seconds are the
// traffic starting rather than a load: a second, the window's resolution.
const rampTime = time.Second

// rampSeconds is how many of bucket n's first seconds lie mostly within
// rampTime of the first traffic. The caller holds w.mu.
func (w *window) rampSeconds(n int64) int {
	if w.first.IsZero() {
		return 0
	}
	start := w.epoch.Add(time.Duration(n) * BucketWidth)
	d := w.first.Add(rampTime).Sub(start) - time.Second/2
	if d <= 0 {
		return 0
	}
	return min(int((d+time.Second-1)/time.Second), subBuckets)
}

// span returns the first bucket of the last n at now, where that span
// starts, and the time it covers: the current bucket partly, and less when
// traffic began more recently.
func (w *window) span(now time.Time, n int64) (from int64, start time.Time, d time.Duration) {
	cur := w.bucketNumber(now)
	from = max(cur-n+1, 0)
	start = w.epoch.Add(time.Duration(from) * BucketWidth)
	if w.first.IsZero() {
		return from, now, 0
	}
	if w.first.After(start) {
		start = w.first
	}
	return from, start, max(now.Sub(start), 0)
}

// bucketSpan is the time bucket n covers at now: BucketWidth, less for the
// current one and the one in which traffic began.
func (w *window) bucketSpan(n int64, now time.Time) time.Duration {
	start := w.epoch.Add(time.Duration(n) * BucketWidth)
	end := start.Add(BucketWidth)
	if start.Before(w.first) {
		start = w.first
	}
	if end.After(now) {
		end = now
	}
	return max(end.Sub(start), 0)
}
