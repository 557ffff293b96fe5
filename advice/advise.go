package advice

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/loomgate/loomgate/advice/predict"
	"github.com/loomgate/loomgate/limiter"
)

// Settings are the admission settings: the mode in force and the values of
// fixed and unbounded mode, so that the alternative to the mode in force
// (otherMode) can be predicted as configured.
type Settings struct {
	// Mode is the admission mode in force; any but Fixed and Adaptive
	// reads as Unbounded.
	Mode limiter.Mode
	// Workers, QueueSize and QueueTimeout are fixed mode's; in adaptive
	// mode Workers is the limit in force (0 while admission is open), and
	// the queue is the same.
	Workers, QueueSize int
	QueueTimeout       time.Duration
	// Bulkhead and BulkheadWait are unbounded mode's.
	Bulkhead     int
	BulkheadWait time.Duration
	// MaxInFlightBytes is the memory bulkhead, 0 when there is none.
	MaxInFlightBytes int64
	// MemoryBudgetBytes is the memory the advice may plan for in-flight
	// requests at the upstream, 0 when none is given.
	MemoryBudgetBytes int64
	// Probe is set when the probe (LOOMGATE_PROBE) may run: where whether
	// the upstream is saturated is unknown, it finds out.
	Probe bool
	// OverheadBytes is what loomgate reserves per request it holds.
	OverheadBytes int64
	// AdaptiveMin and AdaptiveMax bound adaptive mode's limit; Max 0 for
	// none.
	AdaptiveMin, AdaptiveMax int
	// DryRun is set when Mode only counts what it would do: every request
	// is admitted (in force is pass-through), and the advice says what the
	// mode would have done and whether to enforce it.
	DryRun bool
}

// mode is the mode in force; a Settings that names none is unbounded,
// LOOMGATE_MODE's default.
func (s Settings) mode() limiter.Mode {
	switch s.Mode {
	case limiter.Fixed, limiter.Adaptive:
		return s.Mode
	}
	return limiter.Unbounded
}

// queued reports whether the setting in force limits admission and queues
// the rest: fixed mode, or adaptive mode with a limit set. Never in a dry
// run, which admits every request.
func (s Settings) queued() bool {
	return !s.DryRun && (s.Mode == limiter.Fixed || s.Mode == limiter.Adaptive && s.Workers > 0)
}

// Limit is the limit in force: WORKERS (or adaptive's limit), or BULKHEAD
// (0 for none); 0 in a dry run.
func (s Settings) Limit() int {
	switch {
	case s.queued():
		return s.Workers
	case s.Mode == limiter.Adaptive || s.DryRun:
		return 0
	}
	return s.Bulkhead
}

// adaptive reports whether adaptive mode moves the limit in force.
func (s Settings) adaptive() bool { return s.Mode == limiter.Adaptive && !s.DryRun }

func (s Settings) inForce() Setting {
	switch {
	case s.DryRun:
		return Setting{Name: "in force"}
	case s.queued():
		return Setting{Name: "in force", Fixed: true, Adaptive: s.Mode == limiter.Adaptive, Limit: s.Workers, QueueSize: s.QueueSize, Wait: s.QueueTimeout}
	case s.Mode == limiter.Adaptive:
		return Setting{Name: "in force", Adaptive: true}
	}
	return Setting{Name: "in force", Limit: s.Bulkhead, Wait: s.BulkheadWait}
}

// shadowed is, in a dry run, the mode it counts for, as configured; for
// adaptive mode, at its limit now (none while admission is open).
func (s Settings) shadowed() Setting {
	switch s.Mode {
	case limiter.Fixed:
		return Setting{Name: "dry run", Fixed: true, Limit: s.Workers, QueueSize: s.QueueSize, Wait: s.QueueTimeout}
	case limiter.Adaptive:
		return Setting{Name: "dry run", Fixed: s.Workers > 0, Adaptive: true, Limit: s.Workers, QueueSize: s.QueueSize, Wait: s.QueueTimeout}
	}
	return Setting{Name: "dry run", Limit: s.Bulkhead, Wait: s.BulkheadWait}
}

// otherMode is the alternative to the mode in force, as its (inactive)
// variables configure it: unbounded beside fixed or adaptive mode, fixed
// beside unbounded; in a dry run, the mode it counts for.
func (s Settings) otherMode() Setting {
	switch {
	case s.DryRun:
		return s.shadowed()
	case s.queued() || s.Mode == limiter.Adaptive:
		return Setting{Name: "unbounded", Limit: s.Bulkhead, Wait: s.BulkheadWait}
	}
	return Setting{Name: "fixed", Fixed: true, Limit: s.Workers, QueueSize: s.QueueSize, Wait: s.QueueTimeout}
}

// Recommendation is what the advice recommends, with its reasons and what
// each alternative would do.
type Recommendation struct {
	// Mode is the mode to run.
	Mode limiter.Mode
	// Workers is the LOOMGATE_WORKERS to set in fixed mode; 0 when the
	// advice names none.
	Workers int
	// QueueSize is the LOOMGATE_QUEUE_SIZE of a recommended fixed setting
	// (the one in force, kept); 0 when the recommendation is not of fixed
	// mode.
	QueueSize int
	// Bulkhead is the LOOMGATE_BULKHEAD to set in unbounded mode, the
	// fail-fast alternative; 0 when the advice names none.
	Bulkhead int
	// Probe is a bounded step above the limit in force, to try and watch,
	// when the limit holds clients back and the upstream was never seen
	// serving more: its behaviour beyond is unknown. 0 when there is none.
	Probe int
	// Limit is, in adaptive mode (whose limit no variable sets), where
	// its limit should stand: the upstream's capacity when it is
	// saturated; 0 when none should.
	Limit int
	// Reasons are the measured facts behind it, one sentence each.
	Reasons []string
	// Summary says what to do in one or two sentences.
	Summary string
	// Predictions are what the settings in force, the recommendation, the
	// alternative mode (otherMode) and a memory-budget bulkhead would each
	// do to the measured demand; empty without enough traffic.
	Predictions []Prediction

	// verdict is which case of Advise's the figures fell in, for the words
	// of the mode in force.
	verdict verdict
}

// verdict is a case of Advise's reasoning.
type verdict int

const (
	tooLittle verdict = iota
	failing
	saturated
	saturatedAtMost
	routeLocal
	heldBack
	unknownSaturation
	queueDominates
	belowSaturation
)

// The advice's judgements.
const (
	// QueueDominates is the share of requests' time spent in loomgate's own
	// queue from which the queue, not the upstream, makes requests slow.
	QueueDominates = 0.5
	// Headroom is what a recommended limit adds above the measured demand,
	// so that a busier minute than the one measured does not queue again.
	Headroom = 1.1
	// Failing is the share of admitted requests failed by the upstream
	// above which the figures describe its failures rather than its work
	// (a refused connection is answered in a millisecond, and reads as a
	// fast upstream with room to spare), and the advice sizes nothing.
	Failing = 0.1
	// ProbeStep is the step up from a limit beyond which the upstream was
	// never seen: small enough that a stretch it causes is brief and
	// plain in the advice, large enough to show one.
	ProbeStep = 1.25
)

// Advise turns the figures measured under the settings in force into a
// recommendation. It is a pure function, so that the reasoning can be read
// and tested on its own:
//
//   - too little traffic: no advice;
//   - more than Failing of the admitted requests failed at the upstream:
//     no advice, the figures are of failures;
//   - the upstream queues inside for every route: more admission cannot
//     help, so cap admission at its capacity (never below what it served
//     without its service time growing), fixed with a queue if latency can
//     stretch or a bulkhead that fails fast if not;
//   - only some routes queue inside: a global cap would throttle the
//     healthy ones, so none; the bottleneck is behind those routes;
//   - a limit that holds clients back, and an upstream never seen serving
//     what they demand: keep the limit, or step it up by ProbeStep and
//     watch; the capacity is at least the limit, and no more is known;
//   - loomgate's own queue dominating an upstream that is not saturated
//     and was seen serving the demand: raise the limit to the demand (in
//     flight + queued) with headroom, or admit everything;
//   - otherwise the modes are equivalent: keep the simpler one, unbounded;
//   - in every case, with a memory budget and the upstream's bytes per
//     request known, the bulkhead that keeps in-flight memory under it
//     caps the rest.
func Advise(s Settings, f Figures) Recommendation {
	r := Recommendation{Mode: s.mode()}
	if f.Requests < MinRequests {
		r.verdict = tooLittle
		r.Summary = fmt.Sprintf("Not enough traffic to advise yet: %d %s finished in the last %s; the advice needs %d.",
			f.Requests, plural(int(f.Requests), "request", "requests"), roundSpan(f.Span), MinRequests)
		return r
	}
	if share := float64(f.Failed) / float64(f.Requests); share > Failing {
		r.Reasons = append(r.Reasons, fmt.Sprintf("%.0f%% of the %d requests admitted in the last %s failed at the upstream (no answer, past LOOMGATE_UPSTREAM_TIMEOUT, or a 5xx of its own): the service times and throughput measured are those of its failures, not of its work.",
			100*share, f.Requests, roundSpan(f.Span)))
		r.Summary = fmt.Sprintf("The upstream is failing %.0f%% of the admitted requests: no sizing advice until it answers again. Keep the settings in force; a limit sized now would be sized on failures.", 100*share)
		r.verdict = failing
		return speakMode(s, f, r)
	}
	e := f.Estimate
	memCap := memoryBulkhead(s, f)
	var recommended *Setting
	switch {
	case e.Saturated && isKnown(e.Capacity):
		advise := max(int(math.Round(e.Capacity)), int(math.Ceil(e.LowerBound)), 1)
		r.Reasons = append(r.Reasons,
			fmt.Sprintf("The upstream holds %.0f requests on average but serves about %s at once in its unloaded time: it queues the rest inside (a hidden pool, a lock or the CPU).",
				f.InFlight, capacityText(e)),
			stretchReason(f),
			"More admission will not help: it only lengthens the queue inside the upstream.")
		if len(e.Shared) > 1 {
			r.Reasons = append(r.Reasons, fmt.Sprintf("%s wait for the same bottleneck: their service times stretch together as the total load rises, whatever each one's own load, so one cap in loomgate protects them all.",
				strings.Join(quoted(e.Shared), ", ")))
		}
		if e.LowerBound > e.Capacity {
			r.Reasons = append(r.Reasons, fmt.Sprintf("It was seen to serve %.0f at once without its service time growing, so the cap is no lower.", e.LowerBound))
		}
		if memCap > 0 && memCap < advise {
			advise = memCap
		}
		r.Mode, r.Workers, r.Bulkhead, r.verdict = limiter.Fixed, advise, advise, saturated
		r.Summary = fmt.Sprintf("The upstream is saturated; more admission will not help. Cap admission at %d: LOOMGATE_MODE=fixed with LOOMGATE_WORKERS=%d%s if clients can wait in loomgate's queue, or LOOMGATE_MODE=unbounded with LOOMGATE_BULKHEAD=%d to fail fast.",
			advise, advise, s.queueNote(), advise)
		recommended = s.capped(advise)
	case e.Saturated && isKnown(e.CapacityAtMost):
		// Saturated, but its calmest load seen served as much as the rest:
		// that load may already have been past the knee, and the capacity
		// is at most what was served at once at its speed. A cap there
		// loses no throughput and takes the rest out of the queue inside.
		advise := max(int(math.Ceil(e.CapacityAtMost)), 1)
		if memCap > 0 && memCap < advise {
			advise = memCap
		}
		r.Reasons = append(r.Reasons,
			fmt.Sprintf("The upstream holds %.0f requests on average and serves no more than it did at its calmest load: it queues the rest inside (a hidden pool, a lock or the CPU).", f.InFlight),
			stretchReason(f),
			fmt.Sprintf("Its capacity is at most %.0f: what it served at once, counted at the speed of its calmest load, which may itself have been past the knee. A cap at %d loses no throughput; the capacity itself may be lower.", e.CapacityAtMost, advise))
		r.Mode, r.Workers, r.Bulkhead, r.verdict = limiter.Fixed, advise, advise, saturatedAtMost
		r.Summary = fmt.Sprintf("The upstream is saturated, at a capacity of at most %d. Cap admission at %d (LOOMGATE_MODE=fixed with LOOMGATE_WORKERS=%d, or LOOMGATE_MODE=unbounded with LOOMGATE_BULKHEAD=%d to fail fast); %s",
			advise, advise, advise, advise, findOut(s))
		recommended = s.capped(advise)
	case len(e.RouteLocal) > 0:
		r.Reasons = append(r.Reasons,
			fmt.Sprintf("Only %s queue inside the upstream; the other routes are served in their unloaded time.", strings.Join(quoted(e.RouteLocal), ", ")),
			stretchReason(f),
			"A limit in loomgate applies to every route: it would hold back the healthy ones to protect a bottleneck they do not use.")
		r.verdict = routeLocal
		r.Summary = fmt.Sprintf("A bottleneck behind %s only: set no global cap; give %s its own limit in the service (its pool, or a bulkhead in front of its dependency).",
			strings.Join(quoted(e.RouteLocal), ", "), plural(len(e.RouteLocal), "that route", "those routes"))
	case s.Limit() > 0 && f.Demand >= float64(s.Limit())+1 && f.Demand*Headroom > e.Seen &&
		(memCap == 0 || memCap > s.Limit()):
		// The limit holds clients back, and the upstream was never seen
		// serving what they ask: the capacity is at least the limit, and
		// no more is known. Raising to the demand, or admitting every
		// request, would be a guess; a bounded step, watched, finds out.
		probe := max(readableUp(float64(s.Limit())*ProbeStep), s.Limit()+1)
		probe = min(probe, max(readableUp(f.Demand*Headroom), s.Limit()+1))
		if memCap > 0 {
			probe = min(probe, memCap)
		}
		r.Probe = probe
		r.Reasons = append(r.Reasons,
			fmt.Sprintf("Requests spend %.0f%% of their time in loomgate's queue (mean wait %s, service %s): clients keep %.0f requests outstanding, and the limit admits %d.",
				100*f.QueueShare, ms(f.MeanQueue), ms(f.MeanService), f.Demand, s.Limit()),
			notSaturated(f),
			fmt.Sprintf("The upstream was never seen serving more than %.0f at once: its capacity is at least that, and what it does beyond is unknown. Raising the limit to the demand, or admitting every request, would be a guess.", e.Seen))
		variable := "LOOMGATE_WORKERS"
		if s.queued() {
			r.Workers = s.Workers
		} else {
			variable, r.Bulkhead = "LOOMGATE_BULKHEAD", s.Bulkhead
		}
		r.verdict = heldBack
		r.Summary = fmt.Sprintf("Keep %s=%d, or find out whether the upstream serves more: raise it to %d and watch this advice. If its service time stays as it is unloaded, step again; if it stretches, its capacity is found and the advice caps there.",
			variable, s.Limit(), probe)
		recommended = new(s.inForce())
		recommended.Name = "recommended"
	case e.SaturationUnknown != "":
		// Seen at one load only: a healthy upstream and one queueing
		// inside look the same there. Neither a cap nor its absence is
		// advised on that.
		r.Reasons = append(r.Reasons,
			fmt.Sprintf("Whether the upstream is saturated is unknown: it was never seen at a calmer load than now (%.0f in flight), so its service time now (%s) may be what it takes unloaded, or mostly a queue inside it.", f.InFlight, ms(f.MeanService)),
			"A calmer load, or a probe that briefly admits fewer, shows which: if it serves as much with fewer inside, the rest were queueing there.")
		r.verdict = unknownSaturation
		r.Summary = "Not known yet whether the upstream is saturated: it has only been seen at this load. Keep the settings in force; " + findOut(s)
		recommended = nil
	case f.QueueShare >= QueueDominates && s.Limit() > 0:
		r.verdict = queueDominates
		demand := f.Demand
		advise := max(readableUp(demand*Headroom), s.Limit()+1)
		// No further than the upstream was seen to serve: the branch
		// above takes demand beyond it.
		advise = min(advise, max(int(e.Seen), s.Limit()+1))
		r.Reasons = append(r.Reasons,
			fmt.Sprintf("Requests spend %.0f%% of their time in loomgate's queue (mean wait %s, service %s).",
				100*f.QueueShare, ms(f.MeanQueue), ms(f.MeanService)),
			notSaturated(f),
			fmt.Sprintf("Clients keep %.0f requests outstanding (in flight + queued, the last 10 s); %d serve them with %.0f%% headroom.",
				demand, advise, 100*(Headroom-1)))
		capped := memCap > 0 && memCap < advise
		if capped {
			advise = memCap
		}
		if s.queued() {
			r.Mode, r.Workers = limiter.Fixed, advise
			r.Summary = fmt.Sprintf("Raise LOOMGATE_WORKERS to %d or switch to LOOMGATE_MODE=unbounded.", advise)
			if capped {
				r.Summary = fmt.Sprintf("Raise LOOMGATE_WORKERS to %d, as far as the memory budget allows.", advise)
			}
			recommended = &Setting{Name: "recommended", Fixed: true, Limit: advise, QueueSize: s.QueueSize, Wait: s.QueueTimeout}
		} else {
			r.Mode, r.Bulkhead = limiter.Unbounded, advise
			r.Summary = fmt.Sprintf("Raise LOOMGATE_BULKHEAD to %d or set it to 0 to admit every request.", advise)
			if capped {
				r.Summary = fmt.Sprintf("Raise LOOMGATE_BULKHEAD to %d, as far as the memory budget allows.", advise)
			}
			recommended = &Setting{Name: "recommended", Limit: advise, Wait: s.BulkheadWait}
		}
	default:
		r.Mode = limiter.Unbounded
		r.Reasons = append(r.Reasons,
			fmt.Sprintf("Requests spend %.0f%% of their time in loomgate's queue.", 100*f.QueueShare),
			notSaturated(f))
		r.verdict = belowSaturation
		r.Summary = "Below saturation the modes are equivalent: keep the simpler one, LOOMGATE_MODE=unbounded, which has no limit to size."
		switch {
		case s.adaptive() && s.queued():
			r.Reasons = append(r.Reasons, fmt.Sprintf("Adaptive mode's limit of %d does not hold requests back at this load (%.0f in flight on average).", s.Workers, f.InFlight))
		case s.queued():
			r.Reasons = append(r.Reasons, fmt.Sprintf("LOOMGATE_WORKERS=%d does not hold requests back at this load (%.0f in flight on average).", s.Workers, f.InFlight))
		}
		if !e.LoadVaried {
			r.Reasons = append(r.Reasons, "The upstream's capacity is unknown: the load has not varied enough to show where its throughput stops growing. A short ramp shows it: loomgate bench --url http://<this sidecar>/<a path> -c 10,50,100,200,500 --window 10s, then read this advice again.")
		}
		if memCap > 0 {
			r.Bulkhead = memCap
		}
		if !s.queued() && s.Bulkhead == 0 {
			recommended = nil
		} else {
			recommended = &Setting{Name: "recommended", Limit: r.Bulkhead, Wait: s.BulkheadWait}
		}
	}
	switch {
	case memCap > 0:
		r.Reasons = append(r.Reasons, fmt.Sprintf("The upstream's memory grows by %s per request in flight: LOOMGATE_MEMORY_BUDGET_BYTES=%s holds %d requests.",
			bytesText(f.BytesPerRequest), bytesText(float64(s.MemoryBudgetBytes)), memCap))
		if r.Bulkhead == memCap || r.Workers == memCap {
			r.Summary += fmt.Sprintf(" Keep at most %d in flight (LOOMGATE_BULKHEAD=%d in unbounded mode) to stay within the memory budget.", memCap, memCap)
		}
	case s.MemoryBudgetBytes > 0:
		r.Reasons = append(r.Reasons, "A memory budget is set, but the upstream's memory per request is not known yet: set LOOMGATE_UPSTREAM_METRICS_URL and let the load vary.")
	}

	// A capacity seen in History, at another load, still holds; an
	// upstream that never queued has none to model (NaN).
	if f.DemandWhy != "" && f.Requests >= MinRequests {
		r.Reasons = append(r.Reasons, f.DemandWhy+demandConsequence(f, e))
	}
	d := Demand{
		Open:            f.DemandOpen,
		Routes:          f.demand,
		Capacity:        e.Capacity,
		Seen:            e.Seen,
		Unjudged:        e.SaturationUnknown != "",
		OverheadBytes:   float64(s.OverheadBytes),
		BytesPerRequest: f.BytesPerRequest,
	}
	alternatives := []Setting{s.inForce()}
	if recommended != nil {
		alternatives = append(alternatives, *recommended)
		if recommended.Fixed && r.Mode == limiter.Fixed {
			r.QueueSize = recommended.QueueSize
		}
	}
	alternatives = append(alternatives, s.otherMode())
	if memCap > 0 {
		alternatives = append(alternatives, Setting{Name: "memory budget", Limit: memCap})
	}
	for _, a := range alternatives {
		r.Predictions = append(r.Predictions, predict.Predict(a, d))
	}
	return speakMode(s, f, r)
}

// Queue defaults: LOOMGATE_QUEUE_SIZE's and LOOMGATE_QUEUE_TIMEOUT's, for
// a cap recommended where none queues now.
const (
	defaultQueueSize    = 10000
	defaultQueueTimeout = 30 * time.Second
)

// capped is the recommended cap at limit: fixed mode with the queue in
// force, or the default queue where there is none (QUEUE_SIZE=0 rejects
// when every worker is busy, and a cap recommended for clients that can
// wait needs one).
func (s Settings) capped(limit int) *Setting {
	size, wait := s.QueueSize, s.QueueTimeout
	if size <= 0 || wait <= 0 {
		size, wait = defaultQueueSize, defaultQueueTimeout
	}
	return &Setting{Name: "recommended", Fixed: true, Limit: limit, QueueSize: size, Wait: wait}
}

// queueNote names the queue a recommended cap brings, where none is in
// force.
func (s Settings) queueNote() string {
	if s.QueueSize > 0 && s.QueueTimeout > 0 {
		return ""
	}
	return fmt.Sprintf(" and LOOMGATE_QUEUE_SIZE=%d, LOOMGATE_QUEUE_TIMEOUT=%s", defaultQueueSize, defaultQueueTimeout)
}

// speakMode puts r in the words of the mode in force. Adaptive mode, whose
// limit no variable sets, is told what its limit does and where it should
// stand, never a LOOMGATE_WORKERS to edit; a dry run is told that it is
// one, what its mode would have done, and the setting to enforce.
func speakMode(s Settings, f Figures, r Recommendation) Recommendation {
	switch {
	case r.verdict == tooLittle:
	case s.DryRun && s.Mode == limiter.Adaptive:
		// What enforcing it would bring is adaptive mode, not a fixed
		// limit: its advice, at the shadow's limit of the moment.
		r = speakDryRun(s, speakAdaptive(s, f, r))
	case s.DryRun:
		r = speakDryRun(s, r)
	case s.adaptive():
		r = speakAdaptive(s, f, r)
	}
	return r
}

// speakAdaptive is r for adaptive mode.
func speakAdaptive(s Settings, f Figures, r Recommendation) Recommendation {
	limit := s.Workers // the limit now, 0 while admission is open
	bounds := fmt.Sprintf("between LOOMGATE_ADAPTIVE_MIN=%d and ", max(s.AdaptiveMin, 1))
	if s.AdaptiveMax > 0 {
		bounds += fmt.Sprintf("LOOMGATE_ADAPTIVE_MAX=%d", s.AdaptiveMax)
	} else {
		bounds += "no bound (LOOMGATE_ADAPTIVE_MAX=0)"
	}
	switch r.verdict {
	case saturated, saturatedAtMost:
		k := r.Workers
		r.Limit = k
		capacity := fmt.Sprintf("about %d", k)
		if r.verdict == saturatedAtMost {
			capacity = fmt.Sprintf("at most %d", k)
		}
		var now string
		switch {
		case limit == 0:
			now = fmt.Sprintf("Adaptive mode has admission open now, and sets its limit near %d once the upstream is asked for more than that.", k)
		case math.Abs(float64(limit-k)) <= 0.15*float64(k):
			now = fmt.Sprintf("Adaptive mode holds its limit at %d, at that capacity: keep it.", limit)
		default:
			now = fmt.Sprintf("Adaptive mode's limit is %d now; its trials move it towards what the upstream serves.", limit)
		}
		r.Summary = fmt.Sprintf("The upstream is saturated, at a capacity of %s. %s Nothing to set: the mode sizes its limit itself, %s. LOOMGATE_MODE=fixed with LOOMGATE_WORKERS=%d would hold it there without trials.",
			capacity, now, bounds, k)
	case heldBack, queueDominates:
		// The limit is adaptive mode's own, found by its trials: the
		// upstream serving it unstretched is no sign of an upstream with
		// room for more, and "not saturated, capacity at least the limit"
		// would read as one. Demand exceeds what it serves, and the
		// excess waits where it is measured and bounded.
		r.Reasons = []string{
			fmt.Sprintf("Demand exceeds what the upstream serves: clients keep %.0f requests outstanding, adaptive mode holds %d at the upstream, and the rest wait in loomgate's queue (%.0f%% of their time, mean wait %s), measured and bounded by LOOMGATE_QUEUE_TIMEOUT=%s, rather than inside the upstream.",
				f.Demand, limit, 100*f.QueueShare, ms(f.MeanQueue), s.QueueTimeout),
			fmt.Sprintf("At that limit the upstream serves in its unloaded time (%s): its trials raise the limit while throughput follows it, and keep it where the upstream serves no more.", routeStretches(f)),
		}
		r.Summary = fmt.Sprintf("Demand (%.0f outstanding) exceeds what the upstream serves: adaptive mode holds its limit at %d and the excess waits in loomgate's queue. Its trials raise the limit while throughput follows, and keep it where the upstream serves no more. Nothing to set; it moves %s.",
			f.Demand, limit, bounds)
	case belowSaturation:
		r.Summary = "Below saturation adaptive mode keeps admission open, and lifts a limit nothing waits for: nothing to set."
	case routeLocal:
		r.Summary += " Adaptive mode sets no limit for it: one in front of every route would hold back the healthy ones."
	}
	r.Mode, r.Workers, r.Bulkhead, r.Probe, r.QueueSize = limiter.Adaptive, 0, 0, 0, 0
	for i, p := range r.Predictions {
		if p.Name == "recommended" {
			// What adaptive mode does with its limit where it should stand.
			r.Predictions[i].Adaptive = true
		}
	}
	return r
}

// speakDryRun is r for a dry run: the advice is of what is in force,
// every request admitted, and says what the mode it counts for would have
// done, and what to enforce.
func speakDryRun(s Settings, r Recommendation) Recommendation {
	sh := s.shadowed()
	lead := fmt.Sprintf("A dry run of %s: every request is admitted, and what that mode would have done with each is counted (loomgate_dry_run_requests_total).", sh.Describe())
	for _, p := range r.Predictions {
		if p.Name == "dry run" && p.Throughput > 0 {
			r.Reasons = append(r.Reasons, fmt.Sprintf("Enforced, %s would serve %.0f rps, latency p50 %s p99 %s, waiting %s in loomgate's queue, rejecting %.0f a second.",
				sh.Describe(), p.Throughput, ms(p.P50), ms(p.P99), ms(p.MeanQueue), p.Rejected))
		}
	}
	// Enforcing applies the mode counted for, as configured: say which.
	enforce := fmt.Sprintf("To enforce %s, set LOOMGATE_DRY_RUN=false.", sh.Describe())
	if sh.Adaptive {
		enforce = "To enforce adaptive mode, set LOOMGATE_DRY_RUN=false: it sets and moves its limit itself"
		if sh.Limit > 0 {
			enforce += fmt.Sprintf(", %d now", sh.Limit)
		}
		enforce += fmt.Sprintf(", and queues the rest (LOOMGATE_QUEUE_SIZE=%d, LOOMGATE_QUEUE_TIMEOUT=%s).", s.QueueSize, s.QueueTimeout)
	}
	switch {
	case r.verdict == failing || r.verdict == unknownSaturation:
		enforce = "Enforce nothing until this is known."
	case r.Workers > 0 && sh.Fixed && !sh.Adaptive && math.Abs(float64(sh.Limit-r.Workers)) > 0.15*float64(r.Workers):
		enforce = fmt.Sprintf("Before enforcing it, set LOOMGATE_WORKERS=%d: %d is not what the upstream serves.", r.Workers, sh.Limit)
	case r.Workers == 0 && sh.Limit > 0 && !sh.Adaptive:
		enforce = "Enforcing it would hold back an upstream that serves all it is given: keep the dry run, or LOOMGATE_MODE=unbounded."
	}
	r.Summary = lead + " " + r.Summary + " " + enforce
	return r
}

// findOut says how to learn what the upstream does at a calmer load.
func findOut(s Settings) string {
	if s.Probe {
		return "the probe (LOOMGATE_PROBE) finds out within a minute, by admitting fewer for a few seconds and reading what the upstream serves."
	}
	vary := "let the load vary (a short ramp: loomgate bench --url http://<this sidecar>/<a path> -c 10,50,100,200 --window 10s)."
	if s.DryRun {
		// A probe caps admission, which a dry run never does: beside
		// LOOMGATE_DRY_RUN=true, LOOMGATE_PROBE=on is refused at start.
		return "to find out, " + vary
	}
	return "to find out, set LOOMGATE_PROBE=on, which admits fewer for a few seconds and reads what the upstream serves, or " + vary
}

// demandConsequence says what the demand model means for the predictions.
func demandConsequence(f Figures, e Estimate) string {
	switch {
	case !f.DemandOpen:
		return " The predictions hold those clients: each sends its next request when its answer arrives."
	case e.Saturated:
		return " The predictions send requests at that rate: above what a setting serves, its queue fills by the difference each second until QUEUE_SIZE or QUEUE_TIMEOUT rejects them, so a long queue only delays the rejections; LOOMGATE_BULKHEAD fails them fast instead."
	}
	return " The predictions send requests at that rate: above what a setting serves, its queue fills by the difference each second until QUEUE_SIZE or QUEUE_TIMEOUT rejects them."
}

// stretchReason says how the routes' service times compare with their
// unloaded ones.
func stretchReason(f Figures) string {
	var parts []string
	for _, rt := range f.Routes {
		if rt.Baseline == 0 || rt.Requests < MinRequests/10 {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %s (first quartile %.1f× its unloaded %s)", rt.Name, ms(rt.MeanService), rt.Stretch, ms(rt.BaselineP25)))
	}
	if len(parts) == 0 {
		return "Service times have grown above their unloaded values."
	}
	return "Service time by route: " + strings.Join(parts, "; ") + "."
}

// notSaturated says why the upstream is not saturated, with the figures,
// or that it cannot be told.
func notSaturated(f Figures) string {
	e := f.Estimate
	if e.SaturationUnknown != "" {
		return fmt.Sprintf("Whether the upstream is saturated is unknown: it was never seen at a calmer load than now, so its service time now (%s) may be what it takes unloaded, or a queue inside it.", ms(f.MeanService))
	}
	b := fmt.Sprintf("The upstream is not saturated: its service times are what they are unloaded (%s)", routeStretches(f))
	switch {
	case isKnown(e.Capacity):
		b += fmt.Sprintf(", and it sustained about %s at once when it queued", capacityText(e))
	case e.LowerBound > 0:
		b += fmt.Sprintf("; capacity %s, at least the %.0f it served at once without slowing", e.Unknown, e.LowerBound)
	}
	for _, rt := range f.Routes {
		if rt.Slower {
			b += fmt.Sprintf("; %s got slower without more load, a slower dependency rather than saturation", rt.Name)
		}
	}
	return b + "."
}

func routeStretches(f Figures) string {
	var parts []string
	for _, rt := range f.Routes {
		if rt.Baseline > 0 && rt.Requests >= MinRequests/10 {
			parts = append(parts, fmt.Sprintf("%s %.1f×", rt.Name, rt.Stretch))
		}
	}
	if len(parts) == 0 {
		return "no route has a baseline yet"
	}
	return strings.Join(parts, ", ")
}

// capacityText writes the capacity with its range.
func capacityText(e Estimate) string {
	if !isKnown(e.Capacity) {
		return e.Unknown
	}
	text := fmt.Sprintf("%.0f (%.0f to %.0f)", e.Capacity, e.CapacityLow, e.CapacityHigh)
	if math.Round(e.CapacityLow) == math.Round(e.CapacityHigh) {
		text = fmt.Sprintf("%.0f", e.Capacity)
	}
	if e.CapacityAge > 0 {
		// What held when it last queued: the upstream may have changed.
		text += fmt.Sprintf(", as of %s ago, when it last queued inside", e.CapacityAge.Round(time.Second))
	}
	return text
}

func quoted(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = "“" + n + "”"
	}
	return out
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// memoryBulkhead is the most requests in flight that keep the upstream's
// memory within the budget, 0 when either is unknown.
func memoryBulkhead(s Settings, f Figures) int {
	if s.MemoryBudgetBytes <= 0 || f.BytesPerRequest <= 0 {
		return 0
	}
	return max(int(math.Floor(float64(s.MemoryBudgetBytes)/f.BytesPerRequest)), 1)
}

// readableUp rounds x up to two significant digits (219.6 to 220, 1234 to
// 1300), so that a recommendation reads as a setting rather than a
// measurement.
func readableUp(x float64) int {
	if x <= 0 {
		return 0
	}
	// The epsilon keeps float noise (50 × 1.1 = 55.000000000000007) from
	// rounding a whole number up.
	const eps = 1e-9
	if x < 100 {
		return int(math.Ceil(x - eps))
	}
	step := math.Pow(10, math.Floor(math.Log10(x))-1)
	return int(math.Ceil(x/step-eps) * step)
}

// ms writes a duration in milliseconds, or seconds from 10 s, at a
// precision a person reads.
func ms(d time.Duration) string {
	switch {
	case d >= 10*time.Second:
		return fmt.Sprintf("%.1f s", d.Seconds())
	case d >= 10*time.Millisecond:
		return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
	}
}

// roundSpan writes the window's span in whole seconds.
func roundSpan(d time.Duration) string {
	return fmt.Sprintf("%.0f s", d.Seconds())
}

// bytesText writes a size in binary units.
func bytesText(v float64) string {
	switch {
	case v >= 1<<30:
		return fmt.Sprintf("%.1f GiB", v/(1<<30))
	case v >= 1<<20:
		return fmt.Sprintf("%.1f MiB", v/(1<<20))
	case v >= 1<<10:
		return fmt.Sprintf("%.0f KiB", v/(1<<10))
	default:
		return fmt.Sprintf("%.0f B", v)
	}
}

// RetryAfter is the wait to announce to a client that admission refused:
// the time for the requests ahead of it to be served, position × mean
// service ÷ limit, in whole seconds rounded up, at least 1 s and at most
// ceiling rounded up to a whole second. position is where a retry would
// stand in the queue; limit is how many are served at once (below 1 it
// counts as 1); meanService is the window's. Without a service time yet,
// 1 s.
//
// Telling clients the expected wait rather than a constant spreads their
// retries over the time the queue needs to drain, instead of bringing them
// all back at once into the same full queue.
func RetryAfter(position int64, limit int, meanService, ceiling time.Duration) time.Duration {
	limit = max(limit, 1)
	position = max(position, 1)
	wait := float64(position) * meanService.Seconds() / float64(limit)
	secs := math.Ceil(wait)
	top := math.Max(math.Ceil(ceiling.Seconds()), 1)
	secs = math.Min(math.Max(secs, 1), top)
	return time.Duration(secs) * time.Second
}

// The predictions are package predict's: what a setting would do to the
// demand measured.
type (
	Setting     = predict.Setting
	Prediction  = predict.Prediction
	Course      = predict.Course
	CoursePoint = predict.CoursePoint
	Demand      = predict.Demand
	RouteDemand = predict.RouteDemand
)
