package bench

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// WriteOverheadMarkdown writes the overhead scenario's table: per arm the
// CPU per request, the resident memory with the requests held in each
// mode, and the latency added over direct, with ratios to HAProxy's and to
// direct's figures; then where it ran and what was skipped.
func WriteOverheadMarkdown(w io.Writer, res OverheadResult) error {
	cfg := res.Config.withDefaults()
	var direct, haproxy *OverheadRow
	for i := range res.Rows {
		switch res.Rows[i].Name {
		case "direct":
			direct = &res.Rows[i]
		case "HAProxy":
			haproxy = &res.Rows[i]
		}
	}
	var b strings.Builder
	head := []string{"", "CPU per request (c" + fmt.Sprint(cfg.CPUConcurrency) + ")", "× HAProxy", "× direct"}
	head = append(head,
		fmt.Sprintf("RSS, %d held, unbounded", cfg.Held), "× HAProxy",
		fmt.Sprintf("RSS, %d in flight + %d queued", cfg.FixedWorkers, cfg.Held-cfg.FixedWorkers), "× HAProxy")
	for _, c := range cfg.LatencyLevels {
		head = append(head, fmt.Sprintf("added p50, c%d", c), fmt.Sprintf("added p99, c%d", c))
	}
	fmt.Fprintf(&b, "| %s |\n", strings.Join(head, " | "))
	align := make([]string, len(head))
	align[0] = "---"
	for i := 1; i < len(align); i++ {
		align[i] = "--:"
	}
	fmt.Fprintf(&b, "| %s |\n", strings.Join(align, " | "))
	for _, r := range res.Rows {
		cells := []string{r.Name, micros(r.CPUPerRequest)}
		cells = append(cells, ratio(r.CPUPerRequest.Seconds(), haproxy, func(h *OverheadRow) float64 { return h.CPUPerRequest.Seconds() }))
		cells = append(cells, ratio(r.CPUPerRequest.Seconds(), direct, func(h *OverheadRow) float64 { return h.CPUPerRequest.Seconds() }))
		if r.Name == "direct" {
			cells = append(cells, "", "", "", "")
		} else {
			cells = append(cells, mib(r.RSSUnbounded, r.HeldUnbounded),
				ratio(float64(r.RSSUnbounded), haproxy, func(h *OverheadRow) float64 { return float64(h.RSSUnbounded) }))
			if r.RSSFixed == 0 {
				cells = append(cells, "no queue", "")
			} else {
				cells = append(cells, mib(r.RSSFixed, r.HeldFixed),
					ratio(float64(r.RSSFixed), haproxy, func(h *OverheadRow) float64 { return float64(h.RSSFixed) }))
			}
		}
		for i := range cfg.LatencyLevels {
			if i >= len(r.Latency) {
				cells = append(cells, "", "")
				continue
			}
			if r.Name == "direct" || direct == nil || i >= len(direct.Latency) {
				cells = append(cells, "("+millis(r.Latency[i].P50)+")", "("+millis(r.Latency[i].P99)+")")
				continue
			}
			cells = append(cells, millis(r.Latency[i].P50-direct.Latency[i].P50), millis(r.Latency[i].P99-direct.Latency[i].P99))
		}
		fmt.Fprintf(&b, "| %s |\n", strings.Join(cells, " | "))
	}
	fmt.Fprintf(&b, "\nOn %s, load from %s; CPU from /proc/<pid>/stat (user + system) over %v at c%d on `/wait?ms=0` "+
		"(direct: the upstream's own), resident memory the highest VmRSS over %v with %d users on `/wait?ms=%d` "+
		"(in brackets the requests in flight on average, by Little's law: the rest wait in the queue or on the way), latency on `/wait?ms=%d` (direct's own in brackets).",
		res.Machine, res.Load, cfg.Duration, cfg.CPUConcurrency, cfg.Duration, cfg.Held, cfg.HoldDelay.Milliseconds(), cfg.LatencyDelay.Milliseconds())
	if res.StubRSS > 0 {
		fmt.Fprintf(&b, " The upstream (`loomgate stub`, its own process) ended at %.1f MiB resident.", float64(res.StubRSS)/(1<<20))
	}
	if res.WrkRPS > 0 {
		fmt.Fprintf(&b, " Against the upstream directly at c%d, wrk did %.0f rps and the rig %.0f rps (%.0f%% of wrk).",
			cfg.CPUConcurrency, res.WrkRPS, res.RigRPS, 100*res.RigRPS/res.WrkRPS)
	}
	b.WriteString("\n")
	for _, s := range res.Skipped {
		fmt.Fprintf(&b, "\nSkipped %s.\n", s)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func micros(d time.Duration) string {
	return fmt.Sprintf("%.1f µs", float64(d)/float64(time.Microsecond))
}

func millis(d time.Duration) string {
	return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
}

func mib(b int64, held float64) string {
	return fmt.Sprintf("%.1f MiB (%.0f)", float64(b)/(1<<20), held)
}

func ratio(v float64, ref *OverheadRow, of func(*OverheadRow) float64) string {
	if ref == nil || of(ref) == 0 {
		return ""
	}
	return fmt.Sprintf("%.2f", v/of(ref))
}
