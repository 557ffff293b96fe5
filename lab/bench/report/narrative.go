package report

import (
	"fmt"
	"github.com/loomgate/loomgate/lab/bench"
	"github.com/loomgate/loomgate/lab/bench/internal/format"
	"math"
	"slices"
	"strings"
	"time"
)

// series is the rows of one arm of one scenario, by ascending concurrency.
type series struct {
	scenario, arm string
	rows          []bench.Result
}

// group splits results by scenario and arm, in order of first appearance.
func group(results []bench.Result) []series {
	var out []series
	at := map[[2]string]int{}
	for _, r := range results {
		key := [2]string{r.Scenario, r.Arm}
		i, ok := at[key]
		if !ok {
			i = len(out)
			at[key] = i
			out = append(out, series{scenario: r.Scenario, arm: r.Arm})
		}
		out[i].rows = append(out[i].rows, r)
	}
	for i := range out {
		slices.SortStableFunc(out[i].rows, func(a, b bench.Result) int { return a.Concurrency - b.Concurrency })
	}
	return out
}

// plateauShare is how close to its peak throughput a level must be to
// count as on the plateau.
const plateauShare = 0.95

// Narrative derives a few plain sentences from results: the ceiling each arm
// found and why, where the arms diverge and by how much, where requests
// waited, what memory did, and whether the physics check held.
func Narrative(results []bench.Result) []string {
	all := group(results)
	var out []string
	for _, s := range all {
		out = append(out, ceilingSentence(s)...)
	}
	byScenario := map[string][]series{}
	var order []string
	for _, s := range all {
		if byScenario[s.scenario] == nil {
			order = append(order, s.scenario)
		}
		byScenario[s.scenario] = append(byScenario[s.scenario], s)
	}
	for _, name := range order {
		arms := byScenario[name]
		for _, other := range arms[1:] {
			if sent := divergence(arms[0], other); sent != "" {
				out = append(out, sent)
			}
		}
		// The upstream's memory first: that is where admission shows,
		// the requests it lets through being the ones the service holds.
		up := memorySentence(arms, "upstream", upstreamMemory, true)
		side := memorySentence(arms, "sidecar", sidecarMemory, up == "")
		for _, sent := range []string{up, side} {
			if sent != "" {
				out = append(out, sent)
			}
		}
	}
	for _, s := range all {
		if sent := waitSentence(s); sent != "" {
			out = append(out, sent)
		}
	}
	out = append(out, physicsSentence(results))
	return out
}

// ceilingSentence says how far an arm's throughput went: pinned at a
// plateau from some level on, and why if the limit is known, or how far it
// climbed.
func ceilingSentence(s series) []string {
	rows := s.rows
	if len(rows) == 0 {
		return nil
	}
	peak := rows[0]
	for _, r := range rows {
		if r.RPS > peak.RPS {
			peak = r
		}
	}
	if peak.RPS == 0 {
		return []string{fmt.Sprintf("%s completed no request successfully.", s.arm)}
	}
	// The plateau starts at the lowest level from which every level is
	// within plateauShare of the peak.
	from := len(rows)
	for i := len(rows) - 1; i >= 0 && rows[i].RPS >= plateauShare*peak.RPS; i-- {
		from = i
	}
	last := rows[len(rows)-1]
	if from <= len(rows)-2 {
		first := rows[from]
		plateau := meanRPS(rows[from:])
		sent := fmt.Sprintf("%s pins throughput at %.0f rps from c%d on", s.arm, plateau, first.Concurrency)
		if v := first.Physics; v.Ceiling > 0 {
			sent += fmt.Sprintf(" (%d / %s = %.0f rps)", v.Limit, fmtSeconds(v.Service), v.Ceiling)
		} else if sc := first.Sidecar; sc != nil && sc.Loomgate && sc.Service > 0 {
			// With no known limit, Little's law says how many requests
			// the plateau keeps in service: N = X * S.
			sent += fmt.Sprintf(", which at %s of service is about %.0f requests in service at once",
				format.Dur(sc.Service), plateau*sc.Service.Seconds())
		}
		if last.P50 > first.P50*3/2 {
			sent += fmt.Sprintf("; from there only latency grows, p50 %s at c%d to %s at c%d",
				format.Dur(first.P50), first.Concurrency, format.Dur(last.P50), last.Concurrency)
		}
		return []string{sent + "."}
	}
	sent := fmt.Sprintf("%s reaches %.0f rps at c%d with p50 %s", s.arm, peak.RPS, peak.Concurrency, format.Dur(peak.P50))
	if peak.Concurrency == last.Concurrency && len(rows) > 1 {
		sent += ", still climbing at the highest level"
	}
	return []string{sent + "."}
}

func meanRPS(rows []bench.Result) float64 {
	var sum float64
	for _, r := range rows {
		sum += r.RPS
	}
	return sum / float64(len(rows))
}

// divergence compares two arms of a scenario level by level.
func divergence(a, b series) string {
	type pair struct{ a, b bench.Result }
	var common []pair
	for _, ra := range a.rows {
		for _, rb := range b.rows {
			if ra.Concurrency == rb.Concurrency {
				common = append(common, pair{ra, rb})
			}
		}
	}
	if len(common) == 0 {
		return ""
	}
	apart := func(p pair) bool {
		lo := math.Min(p.a.RPS, p.b.RPS)
		return lo == 0 || math.Abs(p.a.RPS-p.b.RPS)/lo > bench.Tolerance
	}
	first := -1
	for i, p := range common {
		if apart(p) {
			first = i
			break
		}
	}
	top := common[len(common)-1]
	if first < 0 {
		return fmt.Sprintf("%s and %s stay within %.0f%% of each other at every level (%.0f and %.0f rps at c%d): what sets them apart is not what limits throughput here.",
			a.arm, b.arm, 100*bench.Tolerance, top.a.RPS, top.b.RPS, top.a.Concurrency)
	}
	hi, lo := top.a, top.b
	if lo.RPS > hi.RPS {
		hi, lo = lo, hi
	}
	var sent string
	switch {
	case first == len(common)-1:
		sent = fmt.Sprintf("%s and %s diverge at c%d: %s serves ", a.arm, b.arm, top.a.Concurrency, hi.Arm)
	case first > 0:
		sent = fmt.Sprintf("%s and %s diverge from c%d on: at c%d %s serves ", a.arm, b.arm, common[first].a.Concurrency, top.a.Concurrency, hi.Arm)
	default:
		sent = fmt.Sprintf("%s and %s differ at every level: at c%d %s serves ", a.arm, b.arm, top.a.Concurrency, hi.Arm)
	}
	if lo.RPS > 0 {
		sent += fmt.Sprintf("%.1f× the throughput of %s (%.0f vs %.0f rps)", hi.RPS/lo.RPS, lo.Arm, hi.RPS, lo.RPS)
	} else {
		sent += fmt.Sprintf("%.0f rps and %s none", hi.RPS, lo.Arm)
	}
	if hi.P50 > 0 && lo.P50 > 0 {
		sent += fmt.Sprintf(", with p50 %s against %s", format.Dur(hi.P50), format.Dur(lo.P50))
	}
	return sent + "."
}

// memorySentence compares the arms' memory, as bytes reads it from a row
// (the upstream's or the sidecar's, as who says), at the highest level they
// all reached, and says which grew. With advise, a gap of half or more
// between the arms ends with what to do about it.
func memorySentence(arms []series, who string, bytes func(bench.Result) int64, advise bool) string {
	type point struct {
		c   int
		mem int64
	}
	top := map[string]point{}
	var parts []string
	notable := false // an arm's memory grew by half, or the arms differ by half
	for _, s := range arms {
		var pts []point
		for _, r := range s.rows {
			if b := bytes(r); b > 0 {
				pts = append(pts, point{r.Concurrency, b})
			}
		}
		if len(pts) == 0 {
			continue
		}
		lo, hi := pts[0], pts[len(pts)-1]
		top[s.arm] = hi
		notable = notable || float64(hi.mem) >= 1.5*float64(lo.mem)
		switch {
		case len(pts) > 1 && float64(hi.mem) > 1.2*float64(lo.mem):
			parts = append(parts, fmt.Sprintf("under %s memory grows from %s at c%d to %s at c%d",
				s.arm, format.Bytes(lo.mem), lo.c, format.Bytes(hi.mem), hi.c))
		case len(pts) > 1:
			// Near one figure only if every level is within 5% of it:
			// "near 27 MiB" over a row that reads 23 is read as a mistake.
			least, most := hi.mem, hi.mem
			for _, p := range pts {
				least, most = min(least, p.mem), max(most, p.mem)
			}
			if float64(most) <= 1.05*float64(least) {
				parts = append(parts, fmt.Sprintf("under %s it stays near %s from c%d to c%d", s.arm, format.Bytes(hi.mem), lo.c, hi.c))
			} else {
				parts = append(parts, fmt.Sprintf("under %s it stays between %s and %s from c%d to c%d", s.arm, format.Bytes(least), format.Bytes(most), lo.c, hi.c))
			}
		default:
			parts = append(parts, fmt.Sprintf("under %s the process holds %s at c%d", s.arm, format.Bytes(hi.mem), hi.c))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	sent := strings.ToUpper(who[:1]) + who[1:] + " memory: " + strings.Join(parts, "; ") + "."
	if len(top) >= 2 {
		var most, least string
		for _, s := range arms {
			p, ok := top[s.arm]
			if !ok {
				continue
			}
			if most == "" || p.mem > top[most].mem {
				most = s.arm
			}
			if least == "" || p.mem < top[least].mem {
				least = s.arm
			}
		}
		if top[most].c == top[least].c && top[least].mem > 0 {
			ratio := float64(top[most].mem) / float64(top[least].mem)
			sent += fmt.Sprintf(" At c%d %s needs %.1f× the %s memory of %s", top[most].c, most, ratio, who, least)
			if ratio >= 1.5 {
				notable = true
				if advise {
					sent += ": budget memory for peak in flight, or put a bulkhead in front"
				}
			}
			sent += "."
		}
	}
	// Smaller changes are the rig's and the sidecar's own connections,
	// noise beside what the experiment is about.
	if !notable {
		return ""
	}
	return sent
}

// waitSentence says where an arm's requests waited at its highest level:
// in the sidecar's queue, or inside the upstream, which the sidecar sees as
// service time growing while its queue stays empty.
func waitSentence(s series) string {
	var timed []bench.Result
	for _, r := range s.rows {
		if r.Sidecar != nil && r.Sidecar.Loomgate && r.Sidecar.Service > 0 {
			timed = append(timed, r)
		}
	}
	if len(timed) == 0 {
		return ""
	}
	lo, hi := timed[0], timed[len(timed)-1]
	q, svc := hi.Sidecar.QueueWait, hi.Sidecar.Service
	switch {
	case q > svc:
		return fmt.Sprintf("Under %s at c%d requests wait %s in the sidecar's queue for %s of service: the queue is where latency grows, and the sidecar's queue-time metric shows it.",
			s.arm, hi.Concurrency, format.Dur(q), format.Dur(svc))
	case len(timed) > 1 && q < svc/10 && svc > lo.Sidecar.Service*3/2:
		return fmt.Sprintf("Under %s the sidecar admits at once (queue %s at c%d) but service time grows from %s at c%d to %s: requests wait inside the upstream, a limit the sidecar does not enforce.",
			s.arm, format.Dur(q), hi.Concurrency, format.Dur(lo.Sidecar.Service), lo.Concurrency, format.Dur(svc))
	}
	return ""
}

func physicsSentence(results []bench.Result) string {
	var flagged []string
	for _, r := range results {
		if r.Physics.Flagged {
			flagged = append(flagged, fmt.Sprintf("%s c%d", r.Arm, r.Concurrency))
		}
	}
	switch {
	case len(flagged) == 0 && len(results) == 1:
		return fmt.Sprintf("Physics check: the row is within %.0f%% of C/R and of limit/service.", 100*bench.Tolerance)
	case len(flagged) == 0:
		return fmt.Sprintf("Physics check: all %d rows within %.0f%% of C/R and of limit/service.", len(results), 100*bench.Tolerance)
	}
	return fmt.Sprintf("Physics check: %d of %d rows are more than %.0f%% off (%s); see the notes under the table.",
		len(flagged), len(results), 100*bench.Tolerance, strings.Join(flagged, ", "))
}

// fmtSeconds writes a service time as the physics formulas read it:
// 0.203 s.
func fmtSeconds(d time.Duration) string {
	return fmt.Sprintf("%.3g s", d.Seconds())
}
