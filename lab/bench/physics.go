package bench

import (
	"fmt"
	"strings"
	"time"
)

// Tolerance is how far, as a fraction, a row may be from what physics
// predicts before it is flagged.
const Tolerance = 0.10

// Physics is what a row is checked against: the closed loop it was measured
// in and, when known, the limit in front of the work.
type Physics struct {
	// Concurrency is the number of virtual users, C.
	Concurrency int
	// RPS is the observed throughput of successes, X.
	RPS float64
	// Mean is the mean latency of the successes, R.
	Mean time.Duration
	// Errors is the number of errors in the window; they explain a row
	// whose successes fall short of C / R.
	Errors int64
	// Window is how long the successes were counted. A window holds up to
	// C completions of requests sent before it began, so a short one may
	// count up to R / Window more than C / R; if zero, no allowance.
	Window time.Duration

	// Limit is how many requests can be in service at once, N: the
	// sidecar's enforced limit, or a pool behind it.
	// If zero, there is no known limit and only C / R is checked.
	Limit int
	// Service is how long one request holds a unit of that limit, S.
	// If zero, there is no known limit and only C / R is checked.
	Service time.Duration
}

// Verdict is the outcome of Physics.Check.
type Verdict struct {
	// Expected is the throughput physics predicts: N / S when the level
	// is saturated (C > N) and both are known, C / R otherwise.
	Expected float64
	// Off is how far the observed throughput is from Expected, as a signed
	// fraction: -0.2 is 20% short.
	Off float64

	// Ceiling is N / S, 0 when either is unknown; Limit and Service are the
	// N and S it was computed from.
	Ceiling float64
	Limit   int
	Service time.Duration

	// Flagged reports a row more than Tolerance off, Reason why.
	Flagged bool
	Reason  string
}

// Check compares a row with the physics of a closed loop.
//
// With C users and no think time, Little's law makes throughput X = C / R
// whatever the system does; a row that misses it means fewer than C
// requests were really in flight: errors, reconnects, or a load generator
// that cannot keep up. With a limit of N requests in service for S each,
// X ≤ N / S always, and a saturated level (C > N) should sit at N / S; a
// saturated level far below it means something other than the limit caps
// the throughput.
func (p Physics) Check() Verdict {
	v := Verdict{Limit: p.Limit, Service: p.Service}
	if p.Limit > 0 && p.Service > 0 {
		v.Ceiling = float64(p.Limit) / p.Service.Seconds()
	}
	if p.Concurrency <= 0 || p.RPS <= 0 || p.Mean <= 0 {
		v.Flagged = true
		v.Reason = "no successful request in the window, nothing to check"
		if p.Errors > 0 {
			v.Reason = fmt.Sprintf("no successful request in the window, %d errors", p.Errors)
		}
		return v
	}

	closed := float64(p.Concurrency) / p.Mean.Seconds()
	saturated := v.Ceiling > 0 && p.Concurrency > p.Limit
	v.Expected = closed
	if saturated {
		v.Expected = v.Ceiling
	}
	v.Off = p.RPS/v.Expected - 1

	var reasons []string
	// Completions of requests sent before the window began may add up to
	// R / Window above C / R; nothing adds to the side below.
	above := Tolerance
	if p.Window > 0 {
		above += p.Mean.Seconds() / p.Window.Seconds()
	}
	if off := p.RPS/closed - 1; off > above || off < -Tolerance {
		why := "fewer than C requests were in flight: reconnects, or a load generator that cannot keep up"
		if p.Errors > 0 {
			why = fmt.Sprintf("fewer than C requests were in flight: %d errors took part of the loop", p.Errors)
		}
		if off > 0 {
			why = "more completions than C users can produce: the window or the clock is wrong"
		}
		reasons = append(reasons, fmt.Sprintf("%.0f rps is %s C/R = %d / %s = %.0f rps: %s",
			p.RPS, pct(off), p.Concurrency, fmtDur(p.Mean), closed, why))
	}
	if v.Ceiling > 0 {
		off := p.RPS/v.Ceiling - 1
		switch {
		case off > Tolerance:
			reasons = append(reasons, fmt.Sprintf("%.0f rps is %s limit/service = %d / %s = %.0f rps: more than the limit was in service",
				p.RPS, pct(off), p.Limit, fmtDur(p.Service), v.Ceiling))
		case saturated && off < -Tolerance:
			reasons = append(reasons, fmt.Sprintf("%.0f rps is %s limit/service = %d / %s = %.0f rps although c%d exceeds the limit: something other than the limit caps throughput",
				p.RPS, pct(off), p.Limit, fmtDur(p.Service), v.Ceiling, p.Concurrency))
		}
	}
	if len(reasons) > 0 {
		v.Flagged = true
		v.Reason = strings.Join(reasons, "; ")
	}
	return v
}

// Capacity is a limit the sidecar cannot see: a connection pool or a hidden
// worker pool in the upstream.
type Capacity struct {
	// Limit is how many requests the resource serves at once.
	// If zero, there is no such limit.
	Limit int
	// Hold is how long one request holds it.
	Hold time.Duration
}

// PhysicsFor is what r is checked against, with c the capacity behind it. A declared capacity is the real
// bottleneck and wins; otherwise the sidecar's own limit and its measured
// service time.
func (r Result) PhysicsFor(c Capacity) Physics {
	p := Physics{Concurrency: r.Concurrency, RPS: r.RPS, Mean: r.Mean, Errors: r.Errors.Total(), Window: r.Window}
	switch sc := r.Sidecar; {
	case c.Limit > 0 && c.Hold > 0:
		p.Limit, p.Service = c.Limit, c.Hold
	case sc != nil && sc.Loomgate && sc.Limit > 0 && sc.Service > 0:
		p.Limit, p.Service = sc.Limit, sc.Service
	}
	return p
}
