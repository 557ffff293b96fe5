package advice

import (
	"fmt"
	"github.com/loomgate/loomgate/advice/hist"
	"math"
	"slices"
	"time"

	"github.com/loomgate/loomgate/advice/predict"
	"github.com/loomgate/loomgate/route"
)

// MinRequests is the least traffic in the window for advice: with fewer
// requests one slow or fast request moves the means by more than a
// percent.
const MinRequests = 100

// Figures are what the window measured, and what the estimate makes of it.
type Figures struct {
	// Span is the time the figures cover: Window, or less when traffic
	// began more recently.
	Span time.Duration
	// Requests counts admitted requests finished in the window, and
	// Rejected the requests admission refused. Failed counts the admitted
	// ones the upstream failed: no answer (refused, reset, past
	// UPSTREAM_TIMEOUT) or a 5xx of its own.
	Requests, Rejected, Failed int64
	// ArrivalRate is requests reaching admission per second, counted as
	// they finish; Throughput is admitted requests finished per second. In
	// a closed loop (clients that wait for each answer before the next)
	// the two are equal whatever the demand, which is why demand is read
	// from InFlight + Queued instead.
	ArrivalRate, Throughput float64
	// InFlight and Queued are time averages of admitted-and-unfinished and
	// waiting requests, from the state sampled every SampleInterval.
	InFlight, Queued float64
	// MeanQueue is the mean wait for admission of the requests that reached
	// it (rejected ones up to their rejection); MeanService the mean time
	// from admission to the upstream's last byte.
	MeanQueue, MeanService time.Duration
	// QueueP50 ... ServiceP99 are quantiles of the window's histograms.
	QueueP50, QueueP99, ServiceP50, ServiceP99 time.Duration
	// LatencyP50 and LatencyP99 are of admitted requests' time in
	// loomgate, queue and service: what the predictions predict.
	LatencyP50, LatencyP99 time.Duration
	// QueueShare is the part of requests' time spent waiting for admission
	// rather than being served, from 0 to 1.
	QueueShare float64
	// Demand is the clients outstanding now (in flight + queued, over the
	// last 10 s): what the predictions are made for.
	Demand float64
	// DemandOpen is set when the demand is open: requests arrive at
	// OpenRate a second whatever the latency, rather than from a number of
	// clients that each wait for an answer (closed, the default).
	// DemandWhy says what the window showed, in a sentence.
	DemandOpen bool
	OpenRate   float64
	DemandWhy  string
	// Routes are the route classes that had answers in the window.
	Routes []RouteFigures
	// Estimate is the judgement of the upstream, from History.
	Estimate Estimate
	// UpstreamMemoryBytes is the upstream's memory at the last scrape, 0
	// when it is not read.
	UpstreamMemoryBytes float64
	// BytesPerRequest is the slope of the upstream's memory against
	// in-flight requests, from the last fit that had enough variation in
	// load to make one; 0 until then.
	BytesPerRequest float64

	// routes are the window's demand by route in unloaded terms, for the
	// predictions: each route's histogram, scaled to its baseline where it
	// queued, and its share of the clients.
	demand []RouteDemand
}

// RouteFigures are one route class's figures.
type RouteFigures struct {
	// Name is the class: a LOOMGATE_ROUTES name, "GET /users" when
	// automatic, or "other".
	Name string
	// Requests and Throughput count the route's full answers in the window.
	Requests   int64
	Throughput float64
	// InFlight is the route's share of the upstream's requests in flight,
	// throughput × mean service (Little's law).
	InFlight float64
	// MeanService and the quantiles are of the window's answers.
	MeanService, ServiceP25, ServiceP50, ServiceP99 time.Duration
	// Baseline and BaselineP25 are the route's mean and first quartile of
	// service time in its least loaded buckets of History: its unloaded
	// time. 0 when unknown.
	Baseline, BaselineP25 time.Duration
	// Stretch is the first quartile now over the baseline's.
	Stretch float64
	// Saturated is set when the route queues inside the upstream.
	Saturated bool
	// Slower is set when its service time grew without more load.
	Slower bool
	// Capacity is the concurrency the route sustains while it queues
	// inside, in unloaded service times; NaN when unknown.
	Capacity float64
}

// figures computes the window's figures and the estimate at now.
func (w *window) figures(now time.Time, names []string) Figures {
	w.mu.Lock()
	defer w.mu.Unlock()
	from, _, d := w.span(now, WindowBuckets)
	cur := w.bucketNumber(now)
	f := Figures{Span: d}
	var queueHist, servHist, totalHist [hist.Buckets]uint64
	var classHist [classes][hist.Buckets]uint64
	var class [classes]classTotals
	var arrivals, samples, inFlightSum, queuedSum int64
	var queueSum, service time.Duration
	for n := from; n <= cur; n++ {
		b := &w.buckets[n%historyBuckets]
		if b.n != n {
			continue
		}
		arrivals += b.arrivals
		f.Rejected += b.rejected
		f.Requests += b.completed
		f.Failed += b.failed
		queueSum += b.queueSum
		service += b.service
		samples += b.samples
		inFlightSum += b.inFlightSum
		queuedSum += b.queuedSum
		for c := range class {
			class[c].n += b.class[c].n
			class[c].service += b.class[c].service
		}
		if l := &w.live[n%WindowBuckets]; l.n == n {
			for i := range queueHist {
				queueHist[i] += uint64(l.queueHist[i])
				servHist[i] += uint64(l.servHist[i])
				totalHist[i] += uint64(l.totalHist[i])
			}
			for c := range classHist {
				if b.class[c].n == 0 {
					continue
				}
				for i := range classHist[c] {
					classHist[c][i] += uint64(l.classHist[c][i])
				}
			}
		}
	}
	if d > 0 {
		f.ArrivalRate = float64(arrivals) / d.Seconds()
		f.Throughput = float64(f.Requests) / d.Seconds()
	}
	if samples > 0 {
		f.InFlight = float64(inFlightSum) / float64(samples)
		f.Queued = float64(queuedSum) / float64(samples)
	}
	if arrivals > 0 {
		f.MeanQueue = queueSum / time.Duration(arrivals)
		f.QueueP50 = hist.Duration(hist.Quantile(0.5, hist.Bounds[:], queueHist[:]))
		f.QueueP99 = hist.Duration(hist.Quantile(0.99, hist.Bounds[:], queueHist[:]))
	}
	if f.Requests > 0 {
		f.MeanService = service / time.Duration(f.Requests)
		f.ServiceP50 = hist.Duration(hist.Quantile(0.5, hist.Bounds[:], servHist[:]))
		f.ServiceP99 = hist.Duration(hist.Quantile(0.99, hist.Bounds[:], servHist[:]))
		f.LatencyP50 = hist.Duration(hist.Quantile(0.5, hist.Bounds[:], totalHist[:]))
		f.LatencyP99 = hist.Duration(hist.Quantile(0.99, hist.Bounds[:], totalHist[:]))
	}
	if total := queueSum + service; total > 0 {
		f.QueueShare = float64(queueSum) / float64(total)
	}

	points, calm, drained := w.historyPoints(now)
	e, routes := estimate(points, calm, from)
	if len(points) == 0 && drained {
		e.Unknown = "unknown: the load fell within every bucket with answers (the end of a peak, or bursts), and what was answered after it fell was of the load before"
		e.SaturationUnknown = e.Unknown
	}
	if isKnown(e.Capacity) && cur > e.capacityAt+1 {
		// Not queueing in the last bucket or the one before: the
		// capacity is what held when it last did.
		e.CapacityAge = time.Duration(cur-e.capacityAt) * BucketWidth
	}
	f.Estimate = e
	var busy, answered []float64
	for c := range class {
		if class[c].n == 0 {
			continue
		}
		r := routes[c]
		name := route.Other
		if c < len(names) {
			name = names[c]
		}
		rf := RouteFigures{
			Name: name, Requests: class[c].n,
			MeanService: class[c].service / time.Duration(class[c].n),
			ServiceP25:  hist.Duration(hist.Quantile(0.25, hist.Bounds[:], classHist[c][:])),
			ServiceP50:  hist.Duration(hist.Quantile(0.5, hist.Bounds[:], classHist[c][:])),
			ServiceP99:  hist.Duration(hist.Quantile(0.99, hist.Bounds[:], classHist[c][:])),
			Baseline:    r.baseline, BaselineP25: r.baselineP25,
			Stretch: r.stretch, Saturated: r.saturated, Slower: r.slower, Capacity: r.capacity,
		}
		if d > 0 {
			rf.Throughput = float64(rf.Requests) / d.Seconds()
			rf.InFlight = class[c].service.Seconds() / d.Seconds()
		}
		switch {
		case rf.Saturated && e.Saturated:
			f.Estimate.Shared = append(f.Estimate.Shared, name)
		case rf.Saturated && e.SaturationUnknown == "":
			f.Estimate.RouteLocal = append(f.Estimate.RouteLocal, name)
		}
		f.Routes = append(f.Routes, rf)
		// The route's distribution in unloaded terms: its shape now,
		// scaled to its baseline mean when it is stretched.
		scale := 1.0
		if r.baseline > 0 && rf.MeanService > 0 && r.saturated {
			scale = float64(r.baseline) / float64(rf.MeanService)
		}
		rd := RouteDemand{Capacity: math.NaN()}
		if r.saturated && !e.Saturated {
			rd.Capacity = r.capacity
		}
		counts := classHist[c]
		if !r.saturated {
			// A route that does not queue inside serves the clients now
			// as it serves them now: where its mean service time over the
			// last two buckets, the span the clients are counted over,
			// is Stretched away from the minute's (a dependency that
			// slowed, with no more load), the minute's answers would mix
			// in the time it no longer takes, its quick answers
			// outvoting the slow seconds since. Otherwise the minute's
			// larger sample is the steadier one.
			if recent, mean, n := w.recentClass(c, from, cur); n >= 2*minClassRequests && rf.MeanService > 0 &&
				max(mean, rf.MeanService) >= time.Duration(Stretched*float64(min(mean, rf.MeanService))) {
				counts = recent
			}
		}
		for i, n := range counts {
			if n == 0 {
				continue
			}
			lower, upper := 0.0, hist.Bounds[len(hist.Bounds)-1]
			if i > 0 {
				lower = hist.Bounds[i-1]
			}
			if i < len(hist.Bounds) {
				upper = hist.Bounds[i]
			}
			rd.Service = append(rd.Service, predict.Sample{Service: hist.Duration(scale * (lower + upper) / 2), Weight: float64(n)})
		}
		f.demand = append(f.demand, rd)
		// The route's part of the clients now: its answers' time in the
		// last two buckets, service and loomgate's queue, which every
		// route waits in alike (FIFO). Service time alone would give a
		// cheap route's clients to the expensive one.
		var recent, queueSum time.Duration
		var answers, arrived int64
		for n := max(cur-1, from); n <= cur; n++ {
			if b := &w.buckets[n%historyBuckets]; b.n == n {
				recent += b.class[c].service
				answers += b.class[c].n
				queueSum += b.queueSum
				arrived += b.arrivals
			}
		}
		wait := 0.0
		if arrived > 0 {
			wait = queueSum.Seconds() / float64(arrived)
		}
		busy = append(busy, recent.Seconds()+float64(answers)*wait)
		answered = append(answered, float64(answers))
	}
	// The clients outstanding now, in flight plus queued over the last two
	// buckets (the minute's average would mix in load that has changed),
	// shared out by the routes' part of the requests in flight, largest
	// remainders first.
	var nowSamples, nowSum int64
	for n := max(cur-1, from); n <= cur; n++ {
		if b := &w.buckets[n%historyBuckets]; b.n == n {
			nowSamples += b.samples
			nowSum += b.inFlightSum + b.queuedSum
		}
	}
	f.Demand = f.InFlight + f.Queued
	if nowSamples > 0 {
		f.Demand = float64(nowSum) / float64(nowSamples)
	}
	if len(f.Estimate.Shared) < 2 {
		f.Estimate.Shared = nil
	}
	slices.Sort(f.Estimate.Shared)
	shareClients(f.demand, busy, int(math.Round(f.Demand)))
	f.DemandOpen, f.OpenRate, f.DemandWhy = w.demandModel(from, cur, now)
	if f.DemandOpen {
		total := 0.0
		for _, a := range answered {
			total += a
		}
		for i := range f.demand {
			if total > 0 {
				f.demand[i].Rate = f.OpenRate * answered[i] / total
			}
		}
	}
	return f
}

// recentClass is route class c's service-time histogram over the last two
// buckets, its mean service time there, and how many answers it holds.
func (w *window) recentClass(c int, from, cur int64) (counts [hist.Buckets]uint64, mean time.Duration, answers int64) {
	var service time.Duration
	for n := max(cur-1, from); n <= cur; n++ {
		b, l := &w.buckets[n%historyBuckets], &w.live[n%WindowBuckets]
		if b.n != n || l.n != n || b.class[c].n == 0 {
			continue
		}
		for i, k := range l.classHist[c] {
			counts[i] += uint64(k)
		}
		service += b.class[c].service
		answers += b.class[c].n
	}
	if answers > 0 {
		mean = service / time.Duration(answers)
	}
	return counts, mean, answers
}

// The judgement of open demand. Arrivals are counted as requests finish,
// so an open stream above what is served shows as requests outstanding that
// keep growing while the answers hold: the arrival rate is the answers'
// plus that growth.
const (
	// openGrowth is the growth of the requests outstanding from one bucket
	// to the next, over the last three, from which they are growing.
	openGrowth = 1.05
	// openSteady is the most the answers a second may vary across those
	// buckets, and the arrivals across buckets of different latency, for
	// them to be holding.
	openSteady = 1.15
)

// demandModel judges whether the demand is open, from the full buckets of
// the last minute (from..cur-1), and says why. The caller holds w.mu.
func (w *window) demandModel(from, cur int64, now time.Time) (open bool, rate float64, why string) {
	type level struct{ out, x, latency float64 }
	var ls []level
	for n := from; n < cur; n++ {
		b := &w.buckets[n%historyBuckets]
		span := w.bucketSpan(n, now)
		if b.n != n || b.samples == 0 || b.arrivals == 0 || span < BucketWidth {
			continue
		}
		ls = append(ls, level{
			out:     float64(b.inFlightSum+b.queuedSum) / float64(b.samples),
			x:       float64(b.arrivals) / span.Seconds(),
			latency: (b.queueSum + b.service).Seconds() / float64(b.arrivals),
		})
	}
	spread := func(get func(level) float64) (lo, hi float64) {
		lo, hi = math.Inf(1), 0
		for _, l := range ls {
			lo, hi = min(lo, get(l)), max(hi, get(l))
		}
		return lo, hi
	}
	if k := len(ls); k >= 3 {
		a, b, c := ls[k-3], ls[k-2], ls[k-1]
		xs := []float64{a.x, b.x, c.x}
		if b.out >= openGrowth*a.out+1 && c.out >= openGrowth*b.out+1 && slices.Max(xs) <= openSteady*slices.Min(xs) {
			growth := (c.out - a.out) / (2 * BucketWidth.Seconds())
			x := (a.x + b.x + c.x) / 3
			return true, x + growth, fmt.Sprintf("Demand is open: the requests outstanding grew from %.0f to %.0f in %.0f s while the answers held at %.0f a second, so requests arrive whatever the latency, about %.0f a second.",
				a.out, c.out, 2*BucketWidth.Seconds(), x, x+growth)
		}
	}
	// Answers that hold while latency grows say nothing more: a closed
	// loop given more clients than a limit or a pool serves does that too.
	// Outstanding requests that held while latency moved are clients.
	if len(ls) >= 2 {
		rlo, rhi := spread(func(l level) float64 { return l.latency })
		olo, ohi := spread(func(l level) float64 { return l.out })
		if rlo > 0 && rhi >= LoadRise*rlo && ohi <= openSteady*olo {
			return false, 0, fmt.Sprintf("Demand is closed: latency went from %s to %s while the requests outstanding held at %.0f, clients that wait for their answers.", ms(hist.Duration(rlo)), ms(hist.Duration(rhi)), ohi)
		}
	}
	return false, 0, "Demand is taken as closed, clients that each wait for an answer: the requests outstanding did not keep growing while the answers held, as an open stream beyond what is served does."
}

// shareClients gives each route its part of n clients, in proportion to
// weights, by largest remainder, at least one to a route with any weight.
func shareClients(routes []RouteDemand, weights []float64, n int) {
	total := 0.0
	for _, w := range weights {
		total += w
	}
	if total <= 0 || n <= 0 {
		return
	}
	given := 0
	rest := make([]float64, len(routes))
	for i, w := range weights {
		exact := w / total * float64(n)
		routes[i].Clients = int(exact)
		rest[i] = exact - float64(routes[i].Clients)
		given += routes[i].Clients
	}
	for ; given < n; given++ {
		best := 0
		for i := range rest {
			if rest[i] > rest[best] {
				best = i
			}
		}
		routes[best].Clients++
		rest[best] = -1
	}
	for i, w := range weights {
		if w > 0 && routes[i].Clients == 0 {
			routes[i].Clients = 1
		}
	}
}

// historyPoints reads History's buckets for the estimate, and the calm
// parts of those in which the load changed (see calmPart), with the number
// of their bucket. The caller holds w.mu.
//
// drained reports whether a bucket was left out for holding a drain (see
// draining).
func (w *window) historyPoints(now time.Time) (ps, calm []point, drained bool) {
	cur := w.bucketNumber(now)
	for n := max(cur-historyBuckets+1, 0); n <= cur; n++ {
		b := &w.buckets[n%historyBuckets]
		if b.n != n || b.completed == 0 {
			continue
		}
		span := w.bucketSpan(n, now)
		if span <= 0 {
			continue
		}
		p := point{n: n, span: span}
		busy := time.Duration(0)
		l := &w.live[n%WindowBuckets]
		for c := range b.class {
			t := b.class[c]
			if t.n == 0 {
				continue
			}
			busy += t.service
			p25, p50, p99 := b.p25[c], b.p50[c], b.p99[c]
			if l.n == n {
				p25 = hist.Duration(hist.Quantile(0.25, hist.Bounds[:], l.classHist[c][:]))
				p50 = hist.Duration(hist.Quantile(0.5, hist.Bounds[:], l.classHist[c][:]))
				p99 = hist.Duration(hist.Quantile(0.99, hist.Bounds[:], l.classHist[c][:]))
			}
			p.class[c] = classPoint{n: t.n, mean: t.service / time.Duration(t.n), p25: p25, p50: p50, p99: p99, x: float64(t.n) / span.Seconds()}
		}
		// The sampler's time average where it ran; Little's law on the
		// answers where it did not.
		if b.samples > 0 {
			p.load = float64(b.inFlightSum) / float64(b.samples)
		} else {
			p.load = busy.Seconds() / span.Seconds()
		}
		cp := point{n: n}
		if l.n == n {
			p.mixed, cp.load = calmPart(b, l, w.rampSeconds(n), &cp.class)
		} else if p.mixed, cp.load = b.mixed, b.calmLoad; p.mixed {
			for c, k := range b.calm {
				us := func(v uint32) time.Duration { return time.Duration(v) * time.Microsecond }
				cp.class[c] = classPoint{n: int64(k.n), unresolved: k.unresolved, mean: us(k.mean), p25: us(k.p25), p50: us(k.p50), p99: us(k.p99), x: float64(k.x)}
			}
		}
		if b.probed {
			// A probe's doing: its steps below stand for it.
			continue
		}
		if w.drained(n, b) {
			// Its answers are partly a load that fell, not its own.
			drained = true
			continue
		}
		if p.mixed {
			calm = append(calm, cp)
		}
		ps = append(ps, p)
	}
	for _, st := range w.steps {
		if now.Sub(st.at) < History {
			calm = append(calm, st.p)
		}
	}
	return ps, calm, drained
}

// meanService is the window's mean service time at now, without the rest
// of the figures: Retry-After asks for it on every rejection.
func (w *window) meanService(now time.Time) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	from, _, _ := w.span(now, WindowBuckets)
	var sum time.Duration
	var n int64
	for i := from; i <= w.bucketNumber(now); i++ {
		if b := &w.buckets[i%historyBuckets]; b.n == i {
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
	from, _, _ := w.span(now, WindowBuckets)
	cur := w.bucketNumber(now)
	if w.first.IsZero() {
		return nil
	}
	var out []BucketFigures
	for n := from; n <= cur; n++ {
		start := w.epoch.Add(time.Duration(n) * BucketWidth)
		end := start.Add(BucketWidth)
		if !end.After(w.first) {
			continue
		}
		bf := BucketFigures{Start: start, Span: w.bucketSpan(n, now)}
		if start.Before(w.first) {
			bf.Start = w.first
		}
		if b := &w.buckets[n%historyBuckets]; b.n == n {
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

// nan reports NaN as the JSON-friendly absent value callers choose.
func isKnown(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }
