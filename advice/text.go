package advice

import (
	"fmt"
	"math"
	"strings"

	"github.com/loomgate/loomgate/limiter"
)

// Text writes the advice for people: the settings, the figures, the
// estimate, the recommendation and what each alternative would do, in
// plain sentences.
func (s Snapshot) Text() string {
	var b strings.Builder
	st, f, r := s.Settings, s.Figures, s.Recommendation
	switch {
	case st.DryRun:
		fmt.Fprintf(&b, "Dry run of %s: every request admitted.", st.shadowed().Describe())
	case st.Mode == limiter.Adaptive && st.Workers > 0:
		fmt.Fprintf(&b, "Mode adaptive, limit %d now, QUEUE_SIZE=%d.", st.Workers, st.QueueSize)
	case st.Mode == limiter.Adaptive:
		fmt.Fprintf(&b, "Mode adaptive, no limit yet (admission open until the upstream queues inside).")
	case st.Mode == limiter.Fixed:
		fmt.Fprintf(&b, "Mode fixed, WORKERS=%d, QUEUE_SIZE=%d.", st.Workers, st.QueueSize)
	case st.Bulkhead > 0:
		fmt.Fprintf(&b, "Mode unbounded, BULKHEAD=%d.", st.Bulkhead)
	default:
		fmt.Fprintf(&b, "Mode unbounded, no bulkhead.")
	}
	if st.MaxInFlightBytes > 0 {
		fmt.Fprintf(&b, " Memory bulkhead %s.", bytesText(float64(st.MaxInFlightBytes)))
	}
	if f.Requests > 0 {
		fmt.Fprintf(&b, " Over the last %s: throughput %.0f rps (arrivals %.0f rps); service %s (p50 %s, p99 %s); queue wait %s (p99 %s); %.0f in flight and %.0f queued on average.",
			roundSpan(f.Span), f.Throughput, f.ArrivalRate, ms(f.MeanService), ms(f.ServiceP50), ms(f.ServiceP99),
			ms(f.MeanQueue), ms(f.QueueP99), f.InFlight, f.Queued)
		if f.Failed > 0 {
			fmt.Fprintf(&b, " The upstream failed %d of the %d admitted requests (%.1f%%).", f.Failed, f.Requests, 100*float64(f.Failed)/float64(f.Requests))
		}
		e := f.Estimate
		verdict := "not saturated"
		switch {
		case e.Saturated && len(e.Shared) > 1:
			verdict = "saturated, shared by " + strings.Join(quoted(e.Shared), ", ")
		case e.Saturated:
			verdict = "saturated"
		case len(e.RouteLocal) > 0:
			verdict = "saturated behind " + strings.Join(quoted(e.RouteLocal), ", ") + " only"
		case e.SaturationUnknown != "":
			verdict = "saturation " + e.SaturationUnknown
		}
		fmt.Fprintf(&b, " Upstream %s; capacity %s", verdict, capacityText(e))
		if e.LowerBound > 0 {
			fmt.Fprintf(&b, ", at least %.0f", e.LowerBound)
		}
		if !isKnown(e.Capacity) && e.Seen > 0 {
			fmt.Fprintf(&b, "; never seen serving more than %.0f at once", e.Seen)
		}
		b.WriteString(".")
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
	if len(f.Routes) > 1 {
		b.WriteString("\nBy route:\n")
		for _, rt := range f.Routes {
			fmt.Fprintf(&b, "- %s: %.0f rps, service %s (p25 %s, unloaded %s, %.1f×)%s\n", rt.Name, rt.Throughput, ms(rt.MeanService),
				ms(rt.ServiceP25), ms(rt.BaselineP25), rt.Stretch, routeVerdict(rt))
		}
	}
	if len(r.Predictions) > 0 {
		if f.DemandOpen {
			fmt.Fprintf(&b, "\nWhat each setting would do in its first %s, from an empty queue, for %.0f requests a second arriving whatever the latency (open demand):\n",
				roundSpan(r.Predictions[0].Span), f.OpenRate)
		} else {
			fmt.Fprintf(&b, "\nWhat each setting would do for %.0f clients that wait for their answers (closed demand):\n", math.Round(f.Demand))
		}
		for _, p := range r.Predictions {
			fmt.Fprintf(&b, "- %s (%s): %.0f rps, latency p50 %s p99 %s, queue wait %s, %.0f rejected/s, %.0f in flight",
				p.Name, p.Setting.Describe(), p.Throughput, ms(p.P50), ms(p.P99), ms(p.MeanQueue), p.Rejected, p.InFlight)
			if c := p.Course; c != nil {
				b.WriteString(courseText(c))
			} else {
				if p.Open && p.QueueGrowth >= 1 {
					fmt.Fprintf(&b, "; its queue grows by %.0f a second", p.QueueGrowth)
				}
				if p.FullAfter > 0 {
					fmt.Fprintf(&b, "; full after %s, then rejecting", ms(p.FullAfter))
				}
			}
			switch {
			case p.Beyond && p.Other != nil:
				fmt.Fprintf(&b, "; if the upstream serves no more than the %.0f seen at once. If it serves all it is given at the speed seen: %.0f rps, p50 %s p99 %s. It lies between, unknown where",
					f.Estimate.Seen, p.Other.Throughput, ms(p.Other.P50), ms(p.Other.P99))
			case p.Beyond:
				fmt.Fprintf(&b, " (if the upstream serves no more than the %.0f seen at once; beyond that it is unknown)", f.Estimate.Seen)
			case p.Other != nil:
				fmt.Fprintf(&b, "; if the upstream's service time stays what it is now. If that time is a queue inside it that this limit empties: %.0f rps, p50 %s p99 %s. It lies between, unknown where",
					p.Other.Throughput, ms(p.Other.P50), ms(p.Other.P99))
			}
			b.WriteString("\n")
		}
	}
	return b.String()
}

// courseText tells an open overload's course under one setting: no
// steady wait exists, only one for each moment of it.
func courseText(c *Course) string {
	var b strings.Builder
	fmt.Fprintf(&b, ". Arrivals exceed what it serves by %.0f%%", 100*c.Excess)
	if c.FullAfter == 0 && c.Rejected > 0 {
		fmt.Fprintf(&b, ": %.0f%% are rejected at once, and nothing waits", 100*c.Rejected)
		return b.String()
	}
	fmt.Fprintf(&b, ": its queue grows by %.0f a second", c.Growth)
	var at []string
	for _, pt := range c.Points {
		at = append(at, fmt.Sprintf("at %s wait %s (latency %s)", roundSpan(pt.At), ms(pt.Wait), ms(pt.Latency)))
	}
	if len(at) > 0 {
		fmt.Fprintf(&b, "; requests arriving %s", strings.Join(at, ", "))
	}
	switch {
	case c.FullAfter > 0 && c.Bounded:
		fmt.Fprintf(&b, "; the queue reaches its bound after %s, and from then on %.0f%% are rejected", roundSpan(c.FullAfter), 100*c.Rejected)
	case c.FullAfter > 0:
		fmt.Fprintf(&b, "; waits reach the queue's timeout after %s, and from then on %.0f%% are rejected", roundSpan(c.FullAfter), 100*c.Rejected)
	default:
		b.WriteString("; nothing bounds the wait but LOOMGATE_UPSTREAM_TIMEOUT")
	}
	return b.String()
}

func routeVerdict(rt RouteFigures) string {
	switch {
	case rt.Saturated && isKnown(rt.Capacity):
		return fmt.Sprintf(": queues inside, capacity %.0f", rt.Capacity)
	case rt.Saturated:
		return ": queues inside"
	case rt.Slower:
		return ": slower without more load"
	}
	return ""
}
