package metrics

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// Settings are the admission settings in force, as the advice needs them.
type Settings struct {
	// Mode is "fixed" or "unbounded".
	Mode string
	// Limit is WORKERS in fixed mode and BULKHEAD in unbounded mode; 0
	// when nothing is limited.
	Limit int
	// QueueLimit is QUEUE_SIZE in fixed mode, 0 otherwise.
	QueueLimit int
	// MaxInFlightBytes is the memory bulkhead, 0 when there is none.
	MaxInFlightBytes int64
	// MemoryBudgetBytes is the memory the advice may plan for in-flight
	// requests, 0 when none is given.
	MemoryBudgetBytes int64
}

// Recommendation is what the advice recommends, with its reasons.
type Recommendation struct {
	// Mode is the mode to run: "fixed" or "unbounded".
	Mode string
	// Workers is the LOOMGATE_WORKERS to set in fixed mode; 0 when the
	// advice names none.
	Workers int
	// QueueSize is the LOOMGATE_QUEUE_SIZE to set; 0 to keep the current one.
	QueueSize int
	// Bulkhead is the LOOMGATE_BULKHEAD to set in unbounded mode, the
	// fail-fast alternative; 0 when the advice names none.
	Bulkhead int
	// Reasons are the measured facts behind it, one sentence each.
	Reasons []string
	// Summary says what to do in one or two sentences.
	Summary string
}

// The advice's judgements.
const (
	// QueueDominates is the share of requests' time spent in loomgate's own
	// queue from which the queue, not the upstream, makes requests slow.
	QueueDominates = 0.5
	// Headroom is what a recommended limit adds above the measured demand,
	// so that a busier minute than the one measured does not queue again.
	Headroom = 1.1
)

// Advise turns the figures measured under the settings in force into a
// recommendation. It is a pure function, so that the reasoning can be read
// and tested on its own:
//
//   - too little traffic: no advice;
//   - the upstream saturated: more admission cannot help, so cap admission
//     at its capacity, fixed with a queue if latency can stretch or a
//     bulkhead that fails fast if not;
//   - loomgate's own queue dominating an upstream that is not saturated:
//     raise the limit to the demand (in flight + queued) with headroom, or
//     admit everything;
//   - otherwise the modes are equivalent: keep the simpler one, unbounded;
//   - in every case, with a memory budget and the upstream's bytes per
//     request known, the bulkhead that keeps in-flight memory under it
//     caps the rest.
func Advise(s Settings, f Figures) Recommendation {
	r := Recommendation{Mode: s.Mode}
	if f.Requests < MinRequests {
		r.Summary = fmt.Sprintf("Not enough traffic to advise yet: %d requests finished in the last %s; the advice needs %d.",
			f.Requests, roundSpan(f.Span), MinRequests)
		return r
	}
	memCap := memoryBulkhead(s, f)
	switch {
	case f.Saturated:
		advise := max(int(math.Round(f.Capacity)), 1)
		r.Reasons = append(r.Reasons,
			fmt.Sprintf("The upstream holds %.0f requests on average but completes only %.0f per second at %s each unloaded: it sustains about %d at once and queues the rest inside (a hidden pool, a lock or the CPU).",
				f.InFlight, f.Throughput, ms(f.UnloadedService), advise),
			fmt.Sprintf("Its service time has grown from %s unloaded to %s.", ms(f.UnloadedService), ms(f.MeanService)),
			"More admission will not help: it only lengthens the queue inside the upstream.")
		if memCap > 0 && memCap < advise {
			advise = memCap
		}
		r.Mode, r.Workers, r.Bulkhead = "fixed", advise, advise
		r.Summary = fmt.Sprintf("The upstream is saturated; more admission will not help. Cap admission at %d: LOOMGATE_MODE=fixed with LOOMGATE_WORKERS=%d if clients can wait in loomgate's queue, or LOOMGATE_MODE=unbounded with LOOMGATE_BULKHEAD=%d to fail fast.",
			advise, advise, advise)
	case f.QueueShare >= QueueDominates && (s.Mode == "fixed" || s.Limit > 0):
		demand := f.InFlight + f.Queued
		advise := max(readableUp(demand*Headroom), s.Limit+1)
		r.Reasons = append(r.Reasons,
			fmt.Sprintf("Requests spend %.0f%% of their time in loomgate's queue (mean wait %s, service %s).",
				100*f.QueueShare, ms(f.MeanQueue), ms(f.MeanService)),
			notSaturated(f),
			fmt.Sprintf("Clients keep %.0f requests outstanding on average (in flight + queued); %d serve them with %.0f%% headroom.",
				demand, advise, 100*(Headroom-1)))
		capped := memCap > 0 && memCap < advise
		if capped {
			advise = memCap
		}
		if s.Mode == "fixed" {
			r.Mode, r.Workers = "fixed", advise
			r.Summary = fmt.Sprintf("Raise LOOMGATE_WORKERS to %d or switch to LOOMGATE_MODE=unbounded.", advise)
			if capped {
				r.Summary = fmt.Sprintf("Raise LOOMGATE_WORKERS to %d, as far as the memory budget allows.", advise)
			}
		} else {
			r.Mode, r.Bulkhead = "unbounded", advise
			r.Summary = fmt.Sprintf("Raise LOOMGATE_BULKHEAD to %d or set it to 0 to admit every request.", advise)
			if capped {
				r.Summary = fmt.Sprintf("Raise LOOMGATE_BULKHEAD to %d, as far as the memory budget allows.", advise)
			}
		}
	default:
		r.Mode = "unbounded"
		r.Reasons = append(r.Reasons,
			fmt.Sprintf("Requests spend %.0f%% of their time in loomgate's queue.", 100*f.QueueShare),
			notSaturated(f))
		r.Summary = "Below saturation the modes are equivalent: keep the simpler one, LOOMGATE_MODE=unbounded, which has no limit to size."
		if s.Mode == "fixed" {
			r.Reasons = append(r.Reasons, fmt.Sprintf("LOOMGATE_WORKERS=%d does not hold requests back at this load (%.0f in flight on average).", s.Limit, f.InFlight))
		}
		if memCap > 0 {
			r.Bulkhead = memCap
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
	return r
}

// notSaturated says why the upstream is not saturated, with the figures.
func notSaturated(f Figures) string {
	return fmt.Sprintf("The upstream is not saturated: it holds %.0f requests on average for a capacity of about %.0f, and serves them in %s (%s unloaded).",
		f.InFlight, f.Capacity, ms(f.MeanService), ms(f.UnloadedService))
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

// Text writes the advice for people: the settings, the figures and the
// recommendation, in a few plain sentences.
func (s Snapshot) Text() string {
	var b strings.Builder
	st, f, r := s.Settings, s.Figures, s.Recommendation
	switch {
	case st.Mode == "fixed":
		fmt.Fprintf(&b, "Mode fixed, WORKERS=%d, QUEUE_SIZE=%d.", st.Limit, st.QueueLimit)
	case st.Limit > 0:
		fmt.Fprintf(&b, "Mode unbounded, BULKHEAD=%d.", st.Limit)
	default:
		fmt.Fprintf(&b, "Mode unbounded, no bulkhead.")
	}
	if st.MaxInFlightBytes > 0 {
		fmt.Fprintf(&b, " Memory bulkhead %s.", bytesText(float64(st.MaxInFlightBytes)))
	}
	if f.Requests > 0 {
		fmt.Fprintf(&b, " Over the last %s: throughput %.0f rps (arrivals %.0f rps); service %s (unloaded %s, p99 %s); queue wait %s (p99 %s); %.0f in flight and %.0f queued on average.",
			roundSpan(f.Span), f.Throughput, f.ArrivalRate, ms(f.MeanService), ms(f.UnloadedService), ms(f.ServiceP99),
			ms(f.MeanQueue), ms(f.QueueP99), f.InFlight, f.Queued)
		if f.Capacity > 0 {
			verdict := "not saturated"
			if f.Saturated {
				verdict = "saturated"
			}
			fmt.Fprintf(&b, " Upstream capacity about %.0f, %s.", f.Capacity, verdict)
		}
	}
	if f.UpstreamMemoryBytes > 0 {
		fmt.Fprintf(&b, " Upstream memory %s", bytesText(f.UpstreamMemoryBytes))
		if f.BytesPerRequest > 0 {
			fmt.Fprintf(&b, ", %s per request in flight", bytesText(f.BytesPerRequest))
		}
		b.WriteString(".")
	}
	b.WriteString("\n\n")
	b.WriteString(r.Summary)
	b.WriteString("\n")
	if len(r.Reasons) > 0 {
		b.WriteString("\nWhy:\n")
		for _, reason := range r.Reasons {
			b.WriteString("- ")
			b.WriteString(reason)
			b.WriteString("\n")
		}
	}
	return b.String()
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
