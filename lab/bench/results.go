package bench

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/loomgate/loomgate/lab/bench/internal/format"
	"github.com/loomgate/loomgate/lab/bench/scrape"
)

// The results of the two pacings: a closed loop's Result, an open loop's
// OpenResult. Both are made from the same recording (record.go); they
// differ in what a row of each kind reports.

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
	Sidecar *scrape.SidecarStats

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
	Sidecar *scrape.OpenSidecar
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
		r.SendRate, fmtRate(r.Rate), r.Throughput, fmtDur(r.P50), fmtDur(r.P99), fmtDur(r.Max), r.Counts.Brief())
	if sc := r.Sidecar; sc != nil && sc.Loomgate {
		s += fmt.Sprintf("; sidecar queued %d→%d (max %d)", sc.QueuedStart, sc.QueuedEnd, sc.PeakQueued)
		if sc.Alerted {
			s += fmt.Sprintf(", queue p99 > %s from %.1f s", fmtDur(scrape.AlertThreshold), sc.AlertAt.Seconds())
		}
	}
	if notes := r.RigNotes(); len(notes) > 0 {
		s += "; rig: " + strings.Join(notes, "; ")
	}
	return s
}

// Brief lists the counts that are not zero, e.g. "1000 2xx, 12 503".
func (c OpenCounts) Brief() string {
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

// Formatting shared with the report writers.
var (
	fmtDur  = format.Dur
	fmtRate = format.Rate
	pct     = format.Pct
)
