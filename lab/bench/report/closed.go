package report

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/loomgate/loomgate/lab/bench"
	"github.com/loomgate/loomgate/lab/bench/internal/format"
	"github.com/loomgate/loomgate/lab/bench/scrape"
)

// closedKind is how closed-loop results are written: a row per level of
// concurrency, checked against the physics of a closed loop.
func closedKind() kind[bench.Result] {
	type R = bench.Result
	col := func(head string, cell func(R) string) column[R] { return column[R]{head: head, cell: cell} }
	// The sidecar's columns, when some row has its figures; empty in a
	// row that does not.
	sidecar := func(head string, cell func(*scrape.SidecarStats) string) column[R] {
		return column[R]{head: head, when: func(rows []R) bool { timed, _, _ := knownColumns(rows); return timed },
			cell: func(r R) string {
				if sc := r.Sidecar; sc != nil && sc.Loomgate {
					return cell(sc)
				}
				return ""
			}}
	}
	return kind[R]{
		scenario: func(r R) string { return r.Scenario },
		arm:      func(r R) string { return r.Arm },
		columns: []column[R]{
			col("c", func(r R) string { return strconv.Itoa(r.Concurrency) }),
			col("rps", func(r R) string { return fmt.Sprintf("%.0f", r.RPS) }),
			col("mean", func(r R) string { return format.Dur(r.Mean) }),
			col("p50", func(r R) string { return format.Dur(r.P50) }),
			col("p95", func(r R) string { return format.Dur(r.P95) }),
			col("p99", func(r R) string { return format.Dur(r.P99) }),
			col("max", func(r R) string { return format.Dur(r.Max) }),
			col("errors", func(r R) string { return fmtErrors(r.Errors) }),
			sidecar("queue", func(sc *scrape.SidecarStats) string { return format.Dur(sc.QueueWait) }),
			sidecar("service", func(sc *scrape.SidecarStats) string { return format.Dur(sc.Service) }),
			sidecar("peak in flight", func(sc *scrape.SidecarStats) string { return strconv.Itoa(sc.PeakInFlight) }),
			sidecar("peak queued", func(sc *scrape.SidecarStats) string { return strconv.Itoa(sc.PeakQueued) }),
			sidecar("limit", func(sc *scrape.SidecarStats) string {
				if sc.Limit > 0 {
					return strconv.Itoa(sc.Limit)
				}
				return "none"
			}),
			{head: "sidecar memory", when: func(rows []R) bool { _, memory, _ := knownColumns(rows); return memory },
				cell: func(r R) string { return format.Bytes(sidecarMemory(r)) }},
			{head: "sidecar CPU/req", when: func(rows []R) bool { return slices.ContainsFunc(rows, func(r R) bool { return sidecarCPU(r) > 0 }) },
				cell: func(r R) string {
					if d := sidecarCPU(r); d > 0 {
						return fmt.Sprintf("%.1f µs", float64(d)/float64(time.Microsecond))
					}
					return ""
				}},
			{head: "upstream memory", when: func(rows []R) bool { _, _, upstream := knownColumns(rows); return upstream },
				cell: func(r R) string { return format.Bytes(upstreamMemory(r)) }},
		},
		verdict: verdict[R]{
			head: "physics", ok: "ok", highlight: true,
			note: func(r R) string {
				if !r.Physics.Flagged {
					return ""
				}
				return fmt.Sprintf("%s c%d: %s", r.Arm, r.Concurrency, r.Physics.Reason)
			},
			notes: fmt.Sprintf("Rows more than %.0f%% off the physics check", 100*bench.Tolerance),
		},
		mergeScenario: true,
		summary:       Narrative,
		charts:        closedCharts,
		csv:           func(rows []R) [][]string { return csvLines(rows, toRecord, closedCSV) },
		json:          func(rows []R) any { return mapRows(rows, toRecord) },
		page: page{Width: "70rem", Font: ".92rem", Pad: ".25rem .55rem",
			Footer: "Physics check: unsaturated, throughput X = C / R (closed loop, C users, mean latency R); saturated, X ≤ N / S (limit N, service time S)."},
	}
}

func fmtErrors(e bench.Errors) string {
	if e.Total() == 0 {
		return "0"
	}
	var parts []string
	for _, p := range []struct {
		n    int64
		kind string
	}{{e.Status, "status"}, {e.Timeout, "timeout"}, {e.Connect, "connect"}} {
		if p.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", p.n, p.kind))
		}
	}
	return fmt.Sprintf("%d (%s)", e.Total(), strings.Join(parts, ", "))
}

// sidecarMemory is the sidecar's peak resident memory, 0 when unknown.
func sidecarMemory(r bench.Result) int64 {
	if r.Sidecar == nil {
		return 0
	}
	return r.Sidecar.MemoryBytes
}

// sidecarCPU is the sidecar's CPU time per request, 0 when unknown.
func sidecarCPU(r bench.Result) time.Duration {
	if r.Sidecar == nil {
		return 0
	}
	return r.Sidecar.CPUPerRequest
}

// upstreamMemory is the upstream's peak resident memory, 0 when unknown.
func upstreamMemory(r bench.Result) int64 { return r.UpstreamMemoryBytes }

// knownColumns says which optional columns some row of results fills: the
// sidecar's queue and service figures, its memory, the upstream's memory.
func knownColumns(results []bench.Result) (timed, memory, upstream bool) {
	for _, r := range results {
		if sc := r.Sidecar; sc != nil {
			timed = timed || sc.Loomgate
			memory = memory || sc.MemoryBytes > 0
		}
		upstream = upstream || r.UpstreamMemoryBytes > 0
	}
	return timed, memory, upstream
}

func mapRows[R, T any](rows []R, f func(R) T) []T {
	out := make([]T, len(rows))
	for i, r := range rows {
		out[i] = f(r)
	}
	return out
}
