package adaptivematrix

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"html/template"
	"image/color"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// The goals adaptive mode is judged against, per case.
const (
	// GoodputMargin: within 10% of the oracle's goodput.
	GoodputMargin = 0.10
	// P99Noise: a p99 no worse than the oracle's, or a reference's, up
	// to the 10% two runs of one arm differ by on shared cores.
	P99Noise = 0.10
	// ConvergeWithin: every phase's limit right within a minute.
	ConvergeWithin = time.Minute
	// GoodputNoise: goodputs within 2% are a tie.
	GoodputNoise = 0.02
)

// Verdict is adaptive mode's judgement on one case.
type Verdict struct {
	Case string
	// Goodput and P99 are adaptive's over the oracle's.
	Goodput, P99 float64
	GoodputOK    bool
	P99OK        bool
	// ConvergedOK: every phase's limit stood right within ConvergeWithin.
	// Untested is set instead when a phase shorter than that ended before
	// the limit stood right: the goal is then neither met nor missed.
	ConvergedOK, Untested bool
	// FloorOK: the limit never went below half the truth.
	FloorOK bool
	// Against each reference: "better", "tie" or "worse".
	Against map[string]string
}

// Met reports whether adaptive met every goal on the case.
func (v Verdict) Met() bool {
	if !v.GoodputOK || !v.P99OK || !v.ConvergedOK || v.Untested || !v.FloorOK {
		return false
	}
	for _, a := range v.Against {
		if a == "worse" {
			return false
		}
	}
	return true
}

// Judge returns adaptive's verdict on each case of results that ran both
// adaptive and the oracle.
func Judge(results []Result) []Verdict {
	var out []Verdict
	byCase := map[string]map[string]Result{}
	var order []string
	for _, r := range results {
		if byCase[r.Case] == nil {
			byCase[r.Case] = map[string]Result{}
			order = append(order, r.Case)
		}
		byCase[r.Case][r.Arm] = r
	}
	for _, name := range order {
		arms := byCase[name]
		a, okA := arms[Adaptive]
		o, okO := arms[Oracle]
		if !okA || !okO {
			continue
		}
		v := Verdict{Case: name, Against: map[string]string{}}
		within, p99Margin := ConvergeWithin, P99Noise
		if c, ok := caseNamed(name); ok {
			within, p99Margin = cmp.Or(c.Within, within), cmp.Or(c.P99Margin, p99Margin)
		}
		v.Goodput = a.Goodput / o.Goodput
		v.P99 = float64(a.P99) / float64(o.P99)
		v.GoodputOK = v.Goodput >= 1-GoodputMargin
		v.P99OK = v.P99 <= 1+p99Margin
		v.ConvergedOK = true
		for i, c := range a.Converged {
			switch {
			case c >= 0 && c <= within:
			case c < 0 && i < len(a.PhaseLengths) && a.PhaseLengths[i] < within:
				v.Untested = true
			default:
				v.ConvergedOK = false
			}
		}
		if !v.ConvergedOK {
			v.Untested = false
		}
		v.FloorOK = !a.Collapsed
		for _, ref := range []string{Envoy, Gradient2} {
			if r, ok := arms[ref]; ok {
				v.Against[ref] = compare(a, r, o)
			}
		}
		out = append(out, v)
	}
	return out
}

// compare says whether a did better than, as well as, or worse than r: by
// goodput, then p99, each beyond its noise; o is the oracle. A reference
// that lets p99 go past the oracle's, beyond its noise, misses the goal a
// is held to, and more goodput bought that way beats no a that meets it:
// on CPU-bound work Gradient2 at 20 served 3% more than adaptive at 3,
// at 1.8 times the oracle's p99.
func compare(a, r, o Result) string {
	if ok := func(x Result) bool { return float64(x.P99) <= (1+P99Noise)*float64(o.P99) }; ok(a) && !ok(r) {
		return "better"
	}
	g := a.Goodput / r.Goodput
	p := float64(a.P99) / float64(r.P99)
	switch {
	case g < 1-GoodputNoise || p > 1+P99Noise:
		return "worse"
	case g > 1+GoodputNoise || p < 1-P99Noise:
		return "better"
	}
	return "tie"
}

// WriteMarkdown writes the matrix: every arm's figures per case, then
// adaptive's verdict per goal.
func WriteMarkdown(w io.Writer, cases []Case, results []Result) error {
	var b strings.Builder
	b.WriteString("| case | arm | goodput (rps) | p50 | p99 | rejected | failed | limit right after (per phase) | lowest limit |\n")
	b.WriteString("| --- | --- | --: | --: | --: | --: | --: | --- | --: |\n")
	rounds := 0
	for _, r := range results {
		arm := r.Arm
		if r.SameAs != "" {
			arm += " (= " + r.SameAs + ": no limit is right)"
		}
		lowest := "none"
		if r.Limited() {
			lowest = fmt.Sprintf("%.0f", r.Lowest)
			if r.Collapsed {
				lowest += " (below half the truth)"
			}
		}
		goodput, p99 := fmt.Sprintf("%.0f", r.Goodput), ms(r.P99)
		if r.Rounds > 1 {
			rounds = r.Rounds
			goodput += fmt.Sprintf(" (%.0f–%.0f)", slices.Min(r.Goodputs), slices.Max(r.Goodputs))
			p99 += fmt.Sprintf(" (%d–%d)", slices.Min(r.P99s).Round(time.Millisecond).Milliseconds(), slices.Max(r.P99s).Round(time.Millisecond).Milliseconds())
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %d | %d | %s | %s |\n", r.Case, arm, goodput,
			ms(r.P50), p99, r.Rejected, r.Failed, convergedCell(r), lowest)
	}
	if rounds > 1 {
		fmt.Fprintf(&b, "\nEach arm ran %d rounds, the arms in turn, each round starting one arm further on: goodput, p50 and p99 are the rounds' means (lowest and highest in brackets), rejected and failed their sums, the limit's time to stand right each phase's slowest round, the lowest limit the lowest of any, and the chart the first round's. Adaptive is judged on the means.\n", rounds)
	}
	verdicts := Judge(results)
	if len(verdicts) > 0 {
		b.WriteString("\n| case | goodput vs oracle (≥ 90%) | p99 vs oracle (≤ 110%) | right within 60 s | never below half the truth | vs Envoy | vs Gradient2 | all goals |\n")
		b.WriteString("| --- | --: | --: | --- | --- | --- | --- | --- |\n")
		for _, v := range verdicts {
			// A case with bounds of its own says them in its cells.
			p99, within := "", ""
			if c, ok := caseNamed(v.Case); ok {
				if c.P99Margin > 0 {
					p99 = fmt.Sprintf(" (≤ %.0f%%)", 100*(1+c.P99Margin))
				}
				if c.Within > 0 {
					within = fmt.Sprintf(" (within %.0f s)", c.Within.Seconds())
				}
			}
			fmt.Fprintf(&b, "| %s | %.0f%% %s | %.0f%% %s%s | %s%s | %s | %s | %s | %s |\n", v.Case,
				100*v.Goodput, mark(v.GoodputOK), 100*v.P99, mark(v.P99OK), p99, convergedMark(v), within, mark(v.FloorOK),
				orDash(v.Against[Envoy]), orDash(v.Against[Gradient2]), metMark(v))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func convergedCell(r Result) string {
	if !r.Limited() && r.Arm != Adaptive {
		return "no limit"
	}
	var parts []string
	for _, c := range r.Converged {
		if c < 0 {
			parts = append(parts, "never")
		} else {
			parts = append(parts, fmt.Sprintf("%.1f s", c.Seconds()))
		}
	}
	return strings.Join(parts, ", ")
}

func ms(d time.Duration) string {
	return fmt.Sprintf("%d ms", d.Round(time.Millisecond).Milliseconds())
}

func convergedMark(v Verdict) string {
	if v.Untested {
		return "not shown: the phase, under 60 s, ended first"
	}
	return mark(v.ConvergedOK)
}

func metMark(v Verdict) string {
	if v.Untested && v.GoodputOK && v.P99OK && v.FloorOK && !slices.Contains(slices.Collect(maps.Values(v.Against)), "worse") {
		return "yes, but convergence not shown"
	}
	return mark(v.Met())
}

func mark(ok bool) string {
	if ok {
		return "yes"
	}
	return "**no**"
}

func orDash(s string) string {
	if s == "" {
		return "–"
	}
	if s == "worse" {
		return "**worse**"
	}
	return s
}

// WriteDir writes report.html (the tables and a chart of the limit over
// time per case, one line per arm), results.md and results.json into dir.
func WriteDir(dir string, cases []Case, results []Result) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var md bytes.Buffer
	if err := WriteMarkdown(&md, cases, results); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.md"), md.Bytes(), 0o644); err != nil {
		return err
	}
	js, err := json.MarshalIndent(results, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), append(js, '\n'), 0o644); err != nil {
		return err
	}
	var page struct {
		Table  string
		Charts []chart
	}
	page.Table = md.String()
	for _, c := range cases {
		svg, err := limitChart(c, results)
		if err != nil {
			return err
		}
		if svg != "" {
			page.Charts = append(page.Charts, chart{Caption: c.Name + ": " + c.Description, SVG: svg})
		}
	}
	var html bytes.Buffer
	if err := reportPage.Execute(&html, page); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "report.html"), html.Bytes(), 0o644)
}

type chart struct {
	Caption string
	SVG     template.HTML
}

var reportPage = template.Must(template.New("report").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>loomgate bench: adaptive</title>
<style>body{font-family:sans-serif;max-width:70em;margin:2em auto}figure{margin:2em 0}pre{white-space:pre-wrap}</style></head>
<body><h1>loomgate bench --scenario adaptive</h1>
<p>Each case through each arm: loomgate's adaptive controller, a limit fixed at the truth (the oracle), no limit,
and the reference controllers of Envoy and Netflix concurrency-limits' Gradient2, all enforcing through the same sidecar.</p>
<pre>{{.Table}}</pre>
{{range .Charts}}<figure>{{.SVG}}<figcaption>{{.Caption}}: the limit over time per arm (the unbounded arm's requests in flight), the truth dashed</figcaption></figure>
{{end}}</body></html>
`))

// limitChart draws c's limit over time, one line per arm, and its truth.
func limitChart(c Case, results []Result) (template.HTML, error) {
	p := plot.New()
	p.Title.Text = c.Name
	p.X.Label.Text = "seconds"
	p.Y.Label.Text = "limit"
	p.Legend.Top = true
	n := 0
	for _, r := range results {
		if r.Case != c.Name || r.SameAs != "" {
			continue
		}
		var xys plotter.XYs
		for _, pt := range r.Series {
			y := pt.Limit
			if r.Arm == Unbounded {
				y = pt.InFlight
			}
			xys = append(xys, plotter.XY{X: pt.At.Seconds(), Y: y})
		}
		if len(xys) == 0 {
			continue
		}
		line, err := plotter.NewLine(xys)
		if err != nil {
			return "", err
		}
		line.Color = plotutil.Color(n)
		line.Width = vg.Points(1.2)
		label := r.Arm
		if r.Arm == Unbounded {
			label += " (in flight)"
			line.Dashes = []vg.Length{vg.Points(1), vg.Points(2)}
		}
		p.Add(line)
		p.Legend.Add(label, line)
		n++
	}
	if n == 0 {
		return "", nil
	}
	var truth plotter.XYs
	at := 0.0
	for _, ph := range c.Phases {
		if ph.Truth.Capacity > 0 {
			truth = append(truth, plotter.XY{X: at, Y: ph.Truth.Capacity}, plotter.XY{X: at + ph.Duration.Seconds(), Y: ph.Truth.Capacity})
		}
		at += ph.Duration.Seconds()
	}
	if len(truth) > 0 {
		line, err := plotter.NewLine(truth)
		if err != nil {
			return "", err
		}
		line.Color = color.Black
		line.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(line)
		p.Legend.Add("truth", line)
	}
	wt, err := p.WriterTo(18*vg.Centimeter, 9*vg.Centimeter, "svg")
	if err != nil {
		return "", err
	}
	var buf bytes.Buffer
	if _, err := wt.WriteTo(&buf); err != nil {
		return "", err
	}
	// Drawn here from numbers; the only text from outside is the arm
	// labels, which the SVG backend escapes.
	out := buf.String()
	if i := strings.Index(out, "<svg"); i > 0 {
		out = out[i:]
	}
	return template.HTML(out), nil
}
