package overhead

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// WriteMarkdown writes the overhead scenario's table: per arm the
// CPU per request at saturation and at a fixed rate (medians of the
// rounds, with their range), with ratios to HAProxy's and to the bare
// fasthttp proxy's, the resident memory with the requests held in each
// mode, with its ratio to HAProxy's, and the latency added over direct;
// then where it ran and what was skipped.
func WriteMarkdown(w io.Writer, res Result) error {
	cfg := res.Config.withDefaults()
	var direct, haproxy, bare *Row
	for i := range res.Rows {
		switch res.Rows[i].Name {
		case "direct":
			direct = &res.Rows[i]
		case "HAProxy":
			haproxy = &res.Rows[i]
		case "bare fasthttp":
			bare = &res.Rows[i]
		}
	}
	var b strings.Builder
	head := []string{"",
		fmt.Sprintf("CPU per request, c%d", cfg.CPUConcurrency), "× HAProxy", "× bare",
		fmt.Sprintf("CPU per request, %.0f rps", cfg.CPURate), "× HAProxy", "× bare"}
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
		closed := func(h *Row) float64 { return h.CPUPerRequest.Seconds() }
		open := func(h *Row) float64 { return h.CPUAtRate.Seconds() }
		cells := []string{r.Name,
			microsRange(r.CPUPerRequest, r.CPURange), ratio(closed(&r), haproxy, closed), ratio(closed(&r), bare, closed),
			microsRange(r.CPUAtRate, r.CPUAtRateRange), ratio(open(&r), haproxy, open), ratio(open(&r), bare, open)}
		if r.Name == "direct" {
			cells = append(cells, "", "", "", "")
		} else {
			cells = append(cells, mib(r.RSSUnbounded, r.HeldUnbounded),
				ratio(float64(r.RSSUnbounded), haproxy, func(h *Row) float64 { return float64(h.RSSUnbounded) }))
			if r.RSSFixed == 0 {
				cells = append(cells, "no queue", "")
			} else {
				cells = append(cells, mib(r.RSSFixed, r.HeldFixed),
					ratio(float64(r.RSSFixed), haproxy, func(h *Row) float64 { return float64(h.RSSFixed) }))
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
	fmt.Fprintf(&b, "\nOn %s, load from %s; CPU from /proc/<pid>/stat (user + system) over %v at c%d, and at %.0f rps open loop from the rig, on `/wait?ms=0` "+
		"(direct: the upstream's own; the median of %d rounds, the arms in turn, lowest and highest in brackets); bare fasthttp is `loomgate stub --forward`, fasthttp's Server and HostClient.Do alone; resident memory the highest VmRSS over %v with %d users on `/wait?ms=%d` "+
		"(in brackets the requests in flight on average, by Little's law: the rest wait in the queue or on the way), latency on `/wait?ms=%d` (direct's own in brackets).",
		res.Machine, res.Load, cfg.Duration, cfg.CPUConcurrency, cfg.CPURate, cfg.Rounds, cfg.Duration, cfg.Held, cfg.HoldDelay.Milliseconds(), cfg.LatencyDelay.Milliseconds())
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

// microsRange is a median with its range, "39.0 µs (37.1–41.2)", or the
// median alone when the range is one figure or unknown.
func microsRange(d time.Duration, r [2]time.Duration) string {
	if r[0] == r[1] {
		return micros(d)
	}
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	return fmt.Sprintf("%.1f µs (%.1f–%.1f)", us(d), us(r[0]), us(r[1]))
}

func millis(d time.Duration) string {
	return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
}

func mib(b int64, held float64) string {
	return fmt.Sprintf("%.1f MiB (%.0f)", float64(b)/(1<<20), held)
}

func ratio(v float64, ref *Row, of func(*Row) float64) string {
	if ref == nil || of(ref) == 0 {
		return ""
	}
	return fmt.Sprintf("%.2f", v/of(ref))
}
