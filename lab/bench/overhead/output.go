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
// fasthttp proxy's (medians of the rounds' ratios, with their range), the
// resident memory with the requests held in each mode, per request held
// and its ratio to HAProxy's, and the latency added over direct; then
// where it ran and what was skipped; then the GOMAXPROCS comparison, if
// it ran.
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
		fmt.Sprintf("RSS, %d held, unbounded", cfg.Held), "per request", "× HAProxy",
		fmt.Sprintf("RSS, %d in flight + %d queued", cfg.FixedWorkers, cfg.Held-cfg.FixedWorkers), "per request", "× HAProxy")
	for _, c := range cfg.LatencyLevels {
		head = append(head, fmt.Sprintf("added p50, c%d", c), fmt.Sprintf("added p99, c%d", c))
	}
	writeHead(&b, head)
	closed := func(r *Row) []time.Duration { return r.CPURounds }
	open := func(r *Row) []time.Duration { return r.CPUAtRateRounds }
	perHeld := func(rss, idle int64) float64 { return float64(rss-idle) / float64(cfg.Held) }
	for _, r := range res.Rows {
		cells := []string{r.Name,
			microsRange(r.CPUPerRequest, r.CPURange), roundsRatio(&r, haproxy, closed), roundsRatio(&r, bare, closed),
			microsRange(r.CPUAtRate, r.CPUAtRateRange), roundsRatio(&r, haproxy, open), roundsRatio(&r, bare, open)}
		if r.Name == "direct" {
			cells = append(cells, "", "", "", "", "", "")
		} else {
			cells = append(cells, mib(r.RSSUnbounded, r.HeldUnbounded), kib(perHeld(r.RSSUnbounded, r.Idle)),
				ratio(perHeld(r.RSSUnbounded, r.Idle), haproxy, func(h *Row) float64 { return perHeld(h.RSSUnbounded, h.Idle) }))
			if r.RSSFixed == 0 {
				cells = append(cells, "no queue", "", "")
			} else {
				cells = append(cells, mib(r.RSSFixed, r.HeldFixed), kib(perHeld(r.RSSFixed, r.Idle)),
					ratio(perHeld(r.RSSFixed, r.Idle), haproxy, func(h *Row) float64 { return perHeld(h.RSSFixed, h.Idle) }))
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
	fmt.Fprintf(&b, "\nOn %s, %s; load from %s. CPU: each process's own (user + system, all its threads, from its CPU clock) per request, "+
		"over %v at c%d and over %v at %.0f rps open loop from the rig, on `/wait?ms=0`, each after %v of warm-up (direct: the upstream's own); "+
		"the median of %s, after one not counted, the arms in turn, a fresh process of each proxy every %d, lowest and highest in brackets; a ratio is the median of the rounds' own ratios, with their range. "+
		"Bare fasthttp is `loomgate stub --forward`, fasthttp's Server and HostClient.Do alone. Memory: the highest VmRSS over %v with %d users on `/wait?ms=%d` "+
		"(in brackets the requests in flight on average, by Little's law: the rest wait in the queue or on the way); per request, above the process's idle resident memory, divided by the %d held. "+
		"Latency on `/wait?ms=%d` (direct's own in brackets).",
		res.Machine, res.Placement, res.Load, cfg.CPUWindow, cfg.CPUConcurrency, cfg.CPUWindow, cfg.CPURate, cpuWarmup, plural(cfg.Rounds, "round"), cfg.ProcessRounds,
		cfg.Duration, cfg.Held, cfg.HoldDelay.Milliseconds(), cfg.Held, cfg.LatencyDelay.Milliseconds())
	if res.StubRSS > 0 {
		fmt.Fprintf(&b, " The upstream (`loomgate stub`, its own process) ended at %.1f MiB resident.", float64(res.StubRSS)/(1<<20))
	}
	if res.WrkRPS > 0 {
		fmt.Fprintf(&b, " Against the upstream directly at c%d, wrk did %.0f rps and the rig %.0f rps (%.0f%% of wrk).",
			cfg.CPUConcurrency, res.WrkRPS, res.RigRPS, 100*res.RigRPS/res.WrkRPS)
	}
	b.WriteString("\n")
	writeLost(&b, res.Rows, cfg)
	for _, s := range res.Skipped {
		fmt.Fprintf(&b, "\nSkipped %s.\n", s)
	}
	writeProtocols(&b, res, cfg)
	if len(res.Procs) > 0 || len(res.ProcsNotes) > 0 {
		writeProcs(&b, res, cfg)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeProcs writes the GOMAXPROCS comparison's table.
func writeProcs(b *strings.Builder, res Result, cfg Config) {
	var haproxy *Row
	for i := range res.Procs {
		if res.Procs[i].Name == "HAProxy" {
			haproxy = &res.Procs[i]
		}
	}
	fmt.Fprintf(b, "\n### GOMAXPROCS\n\n")
	writeHead(b, []string{"",
		fmt.Sprintf("CPU per request, c%d", cfg.CPUConcurrency), "× HAProxy", "rps", "p99",
		fmt.Sprintf("CPU per request, %.0f rps", cfg.CPURate), "× HAProxy", "p99"})
	closed := func(r *Row) []time.Duration { return r.CPURounds }
	open := func(r *Row) []time.Duration { return r.CPUAtRateRounds }
	for _, r := range res.Procs {
		fmt.Fprintf(b, "| %s |\n", strings.Join([]string{r.Name,
			microsRange(r.CPUPerRequest, r.CPURange), roundsRatio(&r, haproxy, closed), fmt.Sprintf("%.0f", r.RPS), millis(r.P99),
			microsRange(r.CPUAtRate, r.CPUAtRateRange), roundsRatio(&r, haproxy, open), millis(r.P99AtRate)}, " | "))
	}
	fmt.Fprintf(b, "\nEvery process on any CPU, as a sidecar shares its node's with its service; load from wrk or the rig as above, the same rounds. "+
		"GOMAXPROCS set in each loomgate's environment; HAProxy with its default threads. The quota arms run in a cgroup granted %.0f%% of one CPU; below 2 CPUs of quota, Go's default GOMAXPROCS is 2.\n",
		100*cfg.Quota)
	writeLost(b, res.Procs, cfg)
	for _, n := range res.ProcsNotes {
		fmt.Fprintf(b, "\n%s.\n", strings.ToUpper(n[:1])+n[1:])
	}
}

// writeLost names the rounds that went without a figure.
func writeLost(b *strings.Builder, rows []Row, cfg Config) {
	var lost []string
	for _, r := range rows {
		if r.Lost > 0 {
			lost = append(lost, fmt.Sprintf("%s at c%d %d of %d", r.Name, cfg.CPUConcurrency, r.Lost, cfg.Rounds))
		}
		if r.LostAtRate > 0 {
			lost = append(lost, fmt.Sprintf("%s at %.0f rps %d of %d", r.Name, cfg.CPURate, r.LostAtRate, cfg.Rounds))
		}
	}
	if len(lost) > 0 {
		fmt.Fprintf(b, "\nRounds without a figure, the load unanswered or the rig behind its rate three turns in a row (a machine busy with more than this run): %s.\n",
			strings.Join(lost, ", "))
	}
}

func writeHead(b *strings.Builder, head []string) {
	fmt.Fprintf(b, "| %s |\n", strings.Join(head, " | "))
	align := make([]string, len(head))
	align[0] = "---"
	for i := 1; i < len(align); i++ {
		align[i] = "--:"
	}
	fmt.Fprintf(b, "| %s |\n", strings.Join(align, " | "))
}

// roundsRatio is r's figures over ref's, round by round (ratioRange), or
// "" without ref.
func roundsRatio(r, ref *Row, of func(*Row) []time.Duration) string {
	if ref == nil {
		return ""
	}
	return ratioRange(of(r), of(ref))
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

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

func kib(b float64) string {
	return fmt.Sprintf("%.1f KiB", b/(1<<10))
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
