package report

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/loomgate/loomgate/lab/bench"
	"github.com/loomgate/loomgate/lab/bench/internal/format"
	"github.com/loomgate/loomgate/lab/bench/scrape"
)

// openKind is how open-loop results are written: a row per rate, with
// what became of the requests due and how well the rig kept to its
// schedule.
func openKind() kind[bench.OpenResult] {
	type R = bench.OpenResult
	col := func(head string, cell func(R) string) column[R] { return column[R]{head: head, cell: cell} }
	n := func(v int64) string { return strconv.FormatInt(v, 10) }
	timed := func(rows []R) bool {
		for _, r := range rows {
			if r.Sidecar != nil && r.Sidecar.Loomgate {
				return true
			}
		}
		return false
	}
	sidecar := func(head string, cell func(*scrape.OpenSidecar) string) column[R] {
		return column[R]{head: head, when: timed, cell: func(r R) string {
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
			col("rate", func(r R) string { return format.Rate(r.Rate) }),
			col("sent/s", func(r R) string { return fmt.Sprintf("%.0f", r.SendRate) }),
			col("2xx/s", func(r R) string { return fmt.Sprintf("%.0f", r.Throughput) }),
			col("p50", func(r R) string { return format.Dur(r.P50) }),
			col("p90", func(r R) string { return format.Dur(r.P90) }),
			col("p99", func(r R) string { return format.Dur(r.P99) }),
			col("max", func(r R) string { return format.Dur(r.Max) }),
			col("2xx", func(r R) string { return n(r.Counts.OK) }),
			col("503", func(r R) string { return n(r.Counts.Unavailable) }),
			col("504", func(r R) string { return n(r.Counts.GatewayTime) }),
			col("other", func(r R) string { return n(r.Counts.OtherStatus) }),
			col("errors", func(r R) string { return n(r.Counts.Errors) }),
			col("timeouts", func(r R) string { return n(r.Counts.Timeouts) }),
			col("not sent", func(r R) string { return n(r.Counts.NotSent) }),
			col("Retry-After", func(r R) string { return r.RetryAfter.String() }),
			sidecar("queued start → end", func(sc *scrape.OpenSidecar) string { return fmt.Sprintf("%d → %d", sc.QueuedStart, sc.QueuedEnd) }),
			sidecar("peak queued", func(sc *scrape.OpenSidecar) string { return strconv.Itoa(sc.PeakQueued) }),
			sidecar("peak in flight", func(sc *scrape.OpenSidecar) string { return strconv.Itoa(sc.PeakInFlight) }),
			sidecar("rejected", fmtRejected),
			sidecar("queue p99 > "+format.Dur(scrape.AlertThreshold), func(sc *scrape.OpenSidecar) string {
				if sc.Alerted {
					return fmt.Sprintf("from %.2f s", sc.AlertAt.Seconds())
				}
				return "no, max " + format.Dur(sc.QueueP99Max)
			}),
		},
		verdict: verdict[R]{
			head: "rig", ok: "on time", left: true,
			note: func(r R) string {
				notes := r.RigNotes()
				if len(notes) == 0 {
					return ""
				}
				return fmt.Sprintf("%s %s rps: %s", r.Arm, format.Rate(r.Rate), strings.Join(notes, "; "))
			},
			notes: "Where the rig fell short of the schedule",
		},
		summary: OpenSummary,
		charts:  openCharts,
		csv:     func(rows []R) [][]string { return csvLines(rows, toOpenRecord, openCSV) },
		json:    func(rows []R) any { return mapRows(rows, toOpenRecord) },
		page: page{Width: "80rem", Font: ".88rem", Pad: ".25rem .5rem",
			Footer: "Open loop: requests are sent at the rate asked for whether or not earlier ones were answered, and latency counts from the time each was due. Counts are of the requests due in the window."},
	}
}

// fmtRejected is the sidecar's rejections in the window, by reason:
// "2400 (2000 queue_timeout, 400 queue_full)".
func fmtRejected(sc *scrape.OpenSidecar) string {
	total := sc.Rejected()
	if total == 0 {
		return "0"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(sc.Outcomes)) {
		if reason, ok := strings.CutPrefix(k, "rejected_"); ok {
			parts = append(parts, fmt.Sprintf("%d %s", sc.Outcomes[k], reason))
		}
	}
	if len(parts) == 1 {
		return parts[0]
	}
	return fmt.Sprintf("%d (%s)", total, strings.Join(parts, ", "))
}

// OpenSummary is a few sentences on open-loop results: for each level, the
// throughput against the rate asked for, and where the rest went.
func OpenSummary(results []bench.OpenResult) []string {
	var out []string
	for _, r := range results {
		if r.Due == 0 {
			continue
		}
		s := fmt.Sprintf("%s at %s rps: %.0f 2xx/s", r.Arm, format.Rate(r.Rate), r.Throughput)
		if short := r.Due - r.Counts.OK; short > 0 {
			s += fmt.Sprintf(", %.0f%% of the requests due did not succeed (%s)", 100*float64(short)/float64(r.Due), r.Counts.Brief())
		} else {
			s += ", every request due succeeded"
		}
		s += fmt.Sprintf("; p99 %s from the time each was due", format.Dur(r.P99))
		if sc := r.Sidecar; sc != nil && sc.Loomgate {
			s += fmt.Sprintf("; the sidecar held up to %d in flight and %d queued", sc.PeakInFlight, sc.PeakQueued)
			if sc.Alerted {
				s += fmt.Sprintf(", and %s's expression crossed %s %.1f s into the load", scrape.AlertName, format.Dur(scrape.AlertThreshold), sc.AlertAt.Seconds())
			}
		}
		out = append(out, s+".")
	}
	return out
}
