package advice

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"
)

// Judgements of the estimate. Noise in a bucket's quartile of a few dozen
// requests is some tens of percent; half again above the baseline is
// beyond it, and well below the fourfold growth of an upstream holding four
// times what it serves.
const (
	// minClassRequests is the fewest answers of a class in a bucket for
	// the bucket to say anything of the class's service time.
	minClassRequests = 10
	// Stretched is the growth of a class's first quartile of service time
	// over its baseline from which the class is queueing inside.
	Stretched = 1.5
	// Unstretched is the growth below which the upstream is serving as it
	// does unloaded.
	Unstretched = 1.25
	// LoadRise is how much more in flight than at the baseline a stretch
	// must come with to be the load's doing: a service time that grew with
	// no more load is a slower dependency, not saturation.
	LoadRise = 1.5
	// Delayed is the growth of a class's first quartile from which, with
	// the load risen, the class waits for a bottleneck that a stretched
	// class shares: above the noise of a quartile over a minute, below the
	// stretch of a long service time behind a short wait.
	Delayed = 1.1
	// baselineShare is the part of a class's buckets, the least loaded,
	// that make its baseline.
	baselineShare = 0.25
	// Confirmed is how much more of a class the upstream must have served
	// at some load than at its baseline for the baseline to be below the
	// knee, its unloaded speed: a baseline already past the knee serves
	// as much as any load above it. Above a bucket's noise in
	// throughput of a few percent.
	Confirmed = 1.15
	// servedNoLess is the least share of what the baseline served that a
	// stretched bucket must serve to read as a queue inside: below it, the
	// upstream got slower rather than fuller. Below a bucket's noise.
	servedNoLess = 0.85
)

// point is one bucket of History, as the estimate reads it.
type point struct {
	n     int64
	span  time.Duration
	load  float64 // requests in flight at the upstream, time-averaged
	class [classes]classPoint
	// mixed: the load changed within the bucket by LoadRise or more; its
	// calm part, not the bucket, is a candidate for the baseline.
	mixed bool
	// probed: a step of a probe below the upstream's knee, where throughput
	// fell with the requests admitted: a baseline at its unloaded speed,
	// with no load above it needed to show it.
	probed bool
}

type classPoint struct {
	n                   int64
	mean, p25, p50, p99 time.Duration
	x                   float64 // answers per second
	// unresolved: in a calm part, the class answered but its quantiles
	// could not be read.
	unresolved bool
}

// Estimate is what the estimate concludes about the upstream.
type Estimate struct {
	// Saturated is set when the upstream queues inside for every route:
	// their service times grew with the load while throughput stopped.
	// They share its bottleneck, whatever each one's own load. It is false
	// both when the upstream is not saturated and when that is unknown:
	// SaturationUnknown tells them apart.
	Saturated bool
	// SaturationUnknown says, in a sentence, why whether the upstream is
	// saturated is unknown; empty when it is known. It is unknown where
	// nothing calmer than the load now was seen (a service first seen at
	// its peak): its service time now may be its unloaded one, or a
	// queue inside it, and only a calmer load, or a probe, tells which.
	SaturationUnknown string
	// NeverCalm is set when SaturationUnknown is for want of a calmer load
	// than now: what a probe, admitting fewer for a few seconds, finds out.
	NeverCalm bool
	// Shared names the routes that share the upstream's bottleneck when it
	// is Saturated and more than one route had answers: their service
	// times stretch together as the total load rises.
	Shared []string
	// RouteLocal names the routes that queue inside when others do not:
	// a bottleneck behind them only, not the upstream's.
	RouteLocal []string
	// Capacity is the concurrency the upstream sustains, the median of
	// what it served at once, in unloaded service times, while it queued
	// inside; CapacityLow and CapacityHigh are the least and most of those
	// buckets. NaN when unknown: it never queued in History.
	Capacity, CapacityLow, CapacityHigh float64
	// CapacityAge is how long ago the upstream was last seen queueing
	// inside, in the buckets the capacity is read from: the capacity is
	// what held then. 0 when it queues now, or the capacity is unknown.
	CapacityAge time.Duration
	// capacityAt is the bucket the upstream was last seen queueing in.
	capacityAt int64
	// CapacityAtMost is, when Capacity is unknown but the upstream was
	// seen queueing inside, the most its capacity can be: what it served
	// at once, counted at its calmest speed seen, which may itself have
	// been past the knee. NaN otherwise.
	CapacityAtMost float64
	// LowerBound is the most requests the upstream was seen to serve at
	// once without its service time growing, from a speed known to be its
	// unloaded one: whatever the capacity, it is no less. No
	// recommendation caps below it. 0 while no unloaded speed is known.
	LowerBound float64
	// Seen is the most requests the upstream was seen to serve at once
	// while no route queued inside: at least LowerBound. Where the capacity
	// is unknown, what the upstream does beyond Seen is unknown too, and no
	// prediction or recommendation goes there on faith.
	Seen float64
	// LoadVaried is set when History holds loads at least LoadRise apart:
	// without that, saturation cannot be told from a slow minute.
	LoadVaried bool
	// Unknown says why Capacity is unknown, in a sentence; empty when it
	// is known.
	Unknown string
}

// routeEstimate is the estimate for one route class.
type routeEstimate struct {
	baseline, baselineP25    time.Duration // unloaded mean and first quartile; 0 when unknown
	baselineP50, baselineP99 time.Duration
	baseLoad                 float64 // load of the baseline buckets
	// confirmed: the baseline is the route's unloaded speed, not a speed
	// already stretched by a queue inside (see Confirmed).
	confirmed bool
	unjudged  bool    // no verdict in the last minute: nothing to compare with
	stretch   float64 // first quartile now ÷ baseline's; 0 when unknown
	saturated bool
	capacity  float64 // NaN when unknown
	slower    bool    // stretched now, without more load
}

// estimate judges the upstream from History's points and the last minute's
// (from the live buckets, those with n ≥ liveFrom), with the calm parts of
// the mixed buckets for the baseline.
func estimate(points, calm []point, liveFrom int64) (Estimate, [classes]routeEstimate) {
	e := Estimate{Capacity: math.NaN(), CapacityLow: math.NaN(), CapacityHigh: math.NaN(), CapacityAtMost: math.NaN()}
	var routes [classes]routeEstimate
	if len(points) == 0 {
		e.Unknown = "unknown: no traffic yet"
		e.SaturationUnknown = e.Unknown
		return e, routes
	}
	lo, hi := math.Inf(1), 0.0
	for _, p := range slices.Concat(points, calm) {
		if p.load > 0 {
			lo, hi = min(lo, p.load), max(hi, p.load)
		}
	}
	e.LoadVaried = hi > 0 && hi >= LoadRise*lo

	// Each class's baseline: its least loaded buckets, or a bucket's calm
	// seconds where the load changed within it. The quartile, not the
	// minimum, of service time: a median several times the minimum is
	// normal, and a minimum only falls as requests accumulate.
	unread := false
	var bases [classes][]point
	for c := range routes {
		var mine []point
		unresolved := math.Inf(1) // the least load of a calm part not read
		for _, p := range points {
			if !p.mixed && p.class[c].n >= minClassRequests {
				mine = append(mine, p)
			}
		}
		for _, p := range calm {
			switch {
			case p.class[c].unresolved:
				unresolved = min(unresolved, p.load)
			case p.class[c].n >= minClassRequests:
				mine = append(mine, p)
			}
		}
		r := &routes[c]
		r.capacity = math.NaN()
		if len(mine) == 0 {
			unread = unread || !math.IsInf(unresolved, 1)
			continue
		}
		slices.SortStableFunc(mine, func(a, b point) int { return cmp.Compare(a.load, b.load) })
		// A calmer time than the baseline's that could not be read: the
		// baseline would not be the route's unloaded time.
		if LoadRise*unresolved <= mine[0].load {
			unread = true
			continue
		}
		// The least loaded quarter, and of it only the buckets near the
		// least load: with few buckets a quarter would reach into load
		// that already stretched the service time.
		base := mine[:max(1, int(math.Ceil(baselineShare*float64(len(mine)))))]
		for len(base) > 1 && base[len(base)-1].load > Unstretched*base[0].load {
			base = base[:len(base)-1]
		}
		var p25s, p50s, p99s, means []time.Duration
		for _, p := range base {
			p25s = append(p25s, p.class[c].p25)
			p50s = append(p50s, p.class[c].p50)
			p99s = append(p99s, p.class[c].p99)
			means = append(means, p.class[c].mean)
			r.baseLoad = max(r.baseLoad, p.load)
			r.confirmed = r.confirmed || p.probed
		}
		r.baselineP25, r.baselineP50, r.baselineP99, r.baseline = median(p25s), median(p50s), median(p99s), median(means)
		bases[c] = base
	}

	// Whether each baseline is the route's unloaded speed. The least
	// loaded buckets are its unloaded speed only if the upstream was below
	// its knee there: a service first seen at its peak has a baseline
	// already stretched by its queue inside, and every bucket since looks
	// unstretched beside it. Below the knee shows as a load half again
	// higher served as fast, or as more answers at some load than at the
	// baseline's (past the knee the upstream serves no more, whatever it
	// is given); or the baseline is a probe's step below the knee.
	// Answers are weighed by the routes' baseline service times, so that
	// a mix that moves to the costly route under load (a shared pool
	// serves fewer of the cheap ones) still counts what is served.
	work := func(p point) float64 {
		w := 0.0
		for c := range routes {
			if cp := p.class[c]; cp.n >= minClassRequests && !cp.unresolved {
				w += cp.x * routes[c].baseline.Seconds()
			}
		}
		return w
	}
	// A bucket whose load rose within it counts too: what it served on
	// average, the calm seconds with the busy ones, the busy ones served.
	mostWork := 0.0
	for _, p := range slices.Concat(points, calm) {
		mostWork = max(mostWork, work(p))
	}
	var baseWork [classes]float64
	for c := range routes {
		var ws []float64
		for _, p := range bases[c] {
			ws = append(ws, work(p))
		}
		if len(ws) > 0 {
			baseWork[c] = median(ws)
		}
	}
	for c := range routes {
		r := &routes[c]
		if r.baselineP25 == 0 || r.confirmed {
			continue
		}
		if w := baseWork[c]; w > 0 && mostWork >= Confirmed*w {
			r.confirmed = true
			continue
		}
		for _, p := range slices.Concat(points, calm) {
			cp := p.class[c]
			if p.mixed || cp.n < minClassRequests || cp.unresolved {
				continue
			}
			if p.load >= LoadRise*r.baseLoad && float64(cp.p25) < Unstretched*float64(r.baselineP25) && float64(cp.p50) < Unstretched*float64(r.baselineP50) {
				r.confirmed = true
				break
			}
		}
	}

	// Stretch per bucket and class, then what the last minute says. By
	// the first quartile, or by the median: where the bottleneck serves
	// the newest first, a quarter of the requests never wait (Go's
	// scheduler runs a goroutine just woken ahead of those queued, and a
	// CPU-bound upstream at 30 times its cores kept its first quartile
	// within 16% of unloaded while its median grew elevenfold).
	//
	// And only while the upstream serves no less than at the baseline: one
	// that queues inside past its knee serves as much as ever, and one that
	// serves less with more inside got slower (a dependency), whatever the
	// load.
	//
	// Nor less than it served unstretched at a load as high: a load that
	// was served in its unloaded time before cannot be what stretches it
	// now. A probe's step below the knee is a baseline at half the load;
	// beside it, a dependency that slowed later under the same 40 clients
	// read as a load risen from 18 to 40, and as a pool of 21.
	calmWork := make([][2]float64, 0, len(points)) // load, work
	for _, p := range slices.Concat(points, calm) {
		quiet, seen := true, false
		for c := range routes {
			r, cp := &routes[c], p.class[c]
			if cp.n < minClassRequests || cp.unresolved || r.baselineP25 == 0 {
				continue
			}
			seen = true
			if float64(cp.p25) >= Unstretched*float64(r.baselineP25) || float64(cp.p50) >= Unstretched*float64(r.baselineP50) {
				quiet = false
			}
		}
		if seen && quiet && !p.mixed {
			calmWork = append(calmWork, [2]float64{p.load, work(p)})
		}
	}
	servedCalm := func(load float64) float64 {
		most := 0.0
		for _, lw := range calmWork {
			if lw[0] <= load {
				most = max(most, lw[1])
			}
		}
		return most
	}
	stretched := func(p point, c int) bool {
		r := &routes[c]
		cp := p.class[c]
		return cp.n >= minClassRequests && r.baselineP25 > 0 && p.load >= LoadRise*r.baseLoad &&
			(float64(cp.p25) >= Stretched*float64(r.baselineP25) || float64(cp.p50) >= Stretched*float64(r.baselineP50)) &&
			work(p) >= servedNoLess*max(baseWork[c], servedCalm(p.load))
	}
	// A bottleneck that several routes share delays each by about the same
	// wait, whatever its own load: a long service time stretches less for
	// it than a short one, and may not reach Stretched. So a class queues
	// in a bucket when it is stretched, or when, with the load risen, it
	// was Delayed, by at least half the delay of a class that is stretched
	// there. A bottleneck behind one route delays that route alone: the
	// others stay as they were.
	delay := func(p point, c int) time.Duration { return p.class[c].p25 - routes[c].baselineP25 }
	most := make([]time.Duration, len(points)) // the longest delay of a stretched class, by point
	for i, p := range points {
		for c := range routes {
			if stretched(p, c) {
				most[i] = max(most[i], delay(p, c))
			}
		}
	}
	queues := func(i int, c int) bool {
		p, r := points[i], &routes[c]
		if stretched(p, c) {
			return true
		}
		cp := p.class[c]
		return most[i] > 0 && cp.n >= minClassRequests && r.baselineP25 > 0 && p.load >= LoadRise*r.baseLoad &&
			float64(cp.p25) >= Delayed*float64(r.baselineP25) && 2*delay(p, c) >= most[i]
	}
	// What the last minute says, by time rather than by answers: a calm
	// spell's many quick answers must not outvote the seconds since.
	// A bucket says a class does not queue only where it was compared with
	// a calmer one (its load half again the baseline's) or the baseline
	// is known to be unloaded: a load no higher than the baseline's,
	// beside a baseline that may itself be stretched, says nothing.
	judged := func(i, c int) bool {
		p, r := points[i], &routes[c]
		return r.confirmed || p.load >= LoadRise*r.baseLoad || queues(i, c)
	}
	var liveSpan, liveQueued, liveJudged [classes]time.Duration
	var liveP25 [classes][]time.Duration
	for i, p := range points {
		if p.n < liveFrom {
			continue
		}
		for c := range routes {
			if p.class[c].n >= minClassRequests {
				liveSpan[c] += p.span
				liveP25[c] = append(liveP25[c], p.class[c].p25)
				if queues(i, c) {
					liveQueued[c] += p.span
				}
				if judged(i, c) {
					liveJudged[c] += p.span
				}
			}
		}
	}
	active, saturated, unjudged := 0, 0, 0
	for c := range routes {
		r := &routes[c]
		if liveSpan[c] == 0 || r.baselineP25 == 0 {
			continue
		}
		active++
		r.stretch = float64(median(liveP25[c])) / float64(r.baselineP25)
		// Most of the minute's time it queued.
		r.saturated = 2*liveQueued[c] > liveSpan[c]
		// Most of the minute's time nothing could tell.
		r.unjudged = !r.saturated && 2*liveJudged[c] < liveSpan[c]
		r.slower = !r.saturated && !r.unjudged && r.stretch >= Stretched
		switch {
		case r.saturated:
			saturated++
		case r.unjudged:
			unjudged++
		}
	}
	// Saturated when every route queues; not, as soon as one route is
	// seen not to (a bottleneck it does not wait for is not the
	// upstream's); unknown otherwise.
	e.Saturated = active > 0 && saturated == active
	if active == 0 || unjudged > 0 && saturated+unjudged == active {
		e.SaturationUnknown = "unknown: never seen at a calmer load than now, so its service time now may be its unloaded one or a queue inside it"
		e.NeverCalm = active > 0
		if active == 0 {
			e.SaturationUnknown = "unknown: no route answered often enough in the last minute to be judged"
		}
	}

	// Capacity: in the buckets where the upstream queued inside, the
	// requests it served at once, in unloaded service times. Where the
	// load changed within the window, only those buckets count, not the
	// window's average throughput.
	for c := range routes {
		var served []float64
		for _, p := range points {
			if stretched(p, c) {
				served = append(served, p.class[c].x*routes[c].baseline.Seconds())
			}
		}
		if len(served) > 0 && routes[c].confirmed {
			routes[c].capacity = median(served)
		}
	}
	// Counted in baseline service times that may themselves be stretched,
	// what is served at once is the capacity or the baseline's load,
	// whichever is more: then it is only the most the capacity can be.
	// The capacity that holds now: what was served in the last
	// recentBuckets of queueing, not over History, whose older buckets are
	// of an upstream that may have changed since (a pool shrunk from 60 to
	// 20 read as 66 for minutes after).
	var served []float64
	var at []int64
	sure := true
	for i, p := range points {
		if !allQueue(p, i, queues) {
			continue
		}
		w := 0.0
		for c := range routes {
			w += p.class[c].x * routes[c].baseline.Seconds()
			if p.class[c].n >= minClassRequests && !routes[c].confirmed {
				sure = false
			}
		}
		served = append(served, w)
		at = append(at, p.n)
	}
	if len(at) > 0 {
		e.capacityAt = at[len(at)-1]
		from := 0
		for from < len(at) && at[from] < e.capacityAt-recentBuckets {
			from++
		}
		served = served[from:]
	}
	switch {
	case len(served) > 0 && (sure || median(served) < 1.5):
		// At most one request at once is one: no limit goes lower.
		e.Capacity = median(served)
		e.CapacityLow, e.CapacityHigh = slices.Min(served), slices.Max(served)
	case len(served) > 0:
		e.CapacityAtMost = median(served)
	}
	// The lower bound: the most held while no class was stretched, by
	// any of its quartile, median and p99. All three: in a bucket in which
	// the load rose, the early answers keep the quartile and the median
	// down while the average held counts the late arrivals, which queued
	// and make the tail.
	// Only buckets in which some class had a baseline to compare with, and
	// the calm parts of mixed ones.
	// And only from a baseline known to be unloaded: beside a stretched
	// one, every load looks unstretched.
	for _, p := range slices.Concat(points, calm) {
		quiet, sure := true, false
		for c := range routes {
			r, cp := &routes[c], p.class[c]
			if cp.n < minClassRequests || cp.unresolved || r.baselineP25 == 0 {
				continue
			}
			sure = sure || r.confirmed
			if float64(cp.p25) >= Unstretched*float64(r.baselineP25) || float64(cp.p50) >= Unstretched*float64(r.baselineP50) ||
				float64(cp.p99) >= Unstretched*float64(r.baselineP99) {
				quiet = false
			}
		}
		if quiet && sure {
			e.LowerBound = max(e.LowerBound, p.load)
		}
	}
	// Seen: the lower bound, or more where the quantiles moved without any
	// route queueing. Not a mixed bucket, whose average load counts the
	// start of an overload with the calm before it.
	e.Seen = e.LowerBound
	for i, p := range points {
		if p.mixed {
			continue
		}
		judged, queued := false, false
		for c := range routes {
			if p.class[c].n >= minClassRequests && routes[c].baselineP25 > 0 {
				judged = true
				queued = queued || queues(i, c)
			}
		}
		if judged && !queued {
			e.Seen = max(e.Seen, p.load)
		}
	}
	switch {
	case !math.IsNaN(e.Capacity):
	case isKnown(e.CapacityAtMost):
		e.Unknown = fmt.Sprintf("unknown: at most %.0f, since the calmest load seen may already have been past its knee", e.CapacityAtMost)
	case e.SaturationUnknown != "" && active > 0:
		e.Unknown = "unknown: never seen at a calmer load than now"
	case unread && active == 0:
		e.Unknown = "unknown: the load changed within a bucket too fast to read its calm seconds"
	case !e.LoadVaried:
		e.Unknown = "unknown: not enough variation in load"
	case saturated > 0 && !e.Saturated:
		e.Unknown = "unknown: only some routes queue inside"
	default:
		e.Unknown = "unknown: the upstream never queued inside in the last 15 minutes"
	}
	return e, routes
}

// recentBuckets is how many buckets before the last one in which the
// upstream queued inside the capacity is read from: half a minute, a few
// buckets for a median, and a change of the upstream followed within it.
const recentBuckets = 6

// allQueue reports whether every class with enough answers in p, point i,
// queues, and at least one has.
func allQueue(p point, i int, queues func(int, int) bool) bool {
	any := false
	for c := range p.class {
		if p.class[c].n < minClassRequests {
			continue
		}
		if !queues(i, c) {
			return false
		}
		any = true
	}
	return any
}

// median is the middle of xs, or the mean of the two middle ones for an
// even count; 0 for none.
func median[T ~int64 | ~float64](xs []T) T {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
