package bench

import (
	"bytes"
	"fmt"
	"html/template"
	"image/color"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Report is what WriteHTML and WriteDir write.
type Report struct {
	// Title heads the report. If empty, "loomgate bench".
	Title string
	// Description, if set, is a paragraph under the title, e.g. the
	// scenario's description.
	Description string
	// Generated, if set, is printed as the time the results were taken.
	Generated time.Time
	Results   []Result
}

// File names WriteDir writes.
const (
	FileCSV  = "results.csv"
	FileJSON = "results.json"
	FileHTML = "report.html"
)

// WriteDir writes results.csv, results.json and report.html into dir,
// creating it if needed.
func (rep Report) WriteDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, f := range []struct {
		name  string
		write func(io.Writer) error
	}{
		{FileCSV, func(w io.Writer) error { return WriteCSV(w, rep.Results) }},
		{FileJSON, func(w io.Writer) error { return WriteJSON(w, rep.Results) }},
		{FileHTML, rep.WriteHTML},
	} {
		var buf bytes.Buffer
		if err := f.write(&buf); err != nil {
			return fmt.Errorf("%s: %w", f.name, err)
		}
		if err := os.WriteFile(filepath.Join(dir, f.name), buf.Bytes(), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// WriteHTML writes the report as one self-contained HTML page: the
// narrative, the charts as inline SVG and the table. It loads nothing: no
// script, stylesheet, font or image from anywhere, so it opens offline.
func (rep Report) WriteHTML(w io.Writer) error {
	if rep.Title == "" {
		rep.Title = "loomgate bench"
	}
	charts, err := buildCharts(rep.Results)
	if err != nil {
		return err
	}
	var table bytes.Buffer
	if err := WriteMarkdown(&table, rep.Results); err != nil {
		return err
	}
	data := struct {
		Report
		Narrative []string
		Charts    []chart
		Rows      []htmlRow
		Notes     []string
		Timed     bool
		Memory    bool
		Upstream  bool
	}{Report: rep, Narrative: Narrative(rep.Results), Charts: charts}
	data.Timed, data.Memory, data.Upstream = knownColumns(rep.Results)
	scenarios := map[string]bool{}
	for _, r := range rep.Results {
		scenarios[r.Scenario] = true
	}
	for _, r := range rep.Results {
		row := htmlRow{Name: r.Arm, Errors: fmtErrors(r.Errors),
			Cells: []string{strconv.Itoa(r.Concurrency), fmt.Sprintf("%.0f", r.RPS),
				fmtDur(r.Mean), fmtDur(r.P50), fmtDur(r.P95), fmtDur(r.P99), fmtDur(r.Max)}}
		if len(scenarios) > 1 && r.Scenario != "" {
			row.Name = r.Scenario + ": " + r.Arm
		}
		if data.Timed {
			if sc := r.Sidecar; sc != nil && sc.Loomgate {
				limit := "none"
				if sc.Limit > 0 {
					limit = strconv.Itoa(sc.Limit)
				}
				row.Sidecar = []string{fmtDur(sc.QueueWait), fmtDur(sc.Service), strconv.Itoa(sc.PeakInFlight), strconv.Itoa(sc.PeakQueued), limit}
			} else {
				row.Sidecar = make([]string, 5)
			}
		}
		row.Memory, row.Upstream = fmtBytes(r.sidecarMemory()), fmtBytes(r.UpstreamMemoryBytes)
		if r.Physics.Flagged {
			data.Notes = append(data.Notes, fmt.Sprintf("%s c%d: %s", r.Arm, r.Concurrency, r.Physics.Reason))
			row.Note = len(data.Notes)
		}
		data.Rows = append(data.Rows, row)
	}
	return reportTemplate.Execute(w, data)
}

type htmlRow struct {
	Name    string
	Cells   []string
	Errors  string
	Sidecar []string
	// Memory and Upstream are the sidecar's and the upstream's peak
	// resident memory, empty when unknown.
	Memory   string
	Upstream string
	Note     int // 1-based index of the physics note, 0 when the row is ok
}

type chart struct {
	Caption string
	SVG     template.HTML
}

var reportTemplate = template.Must(template.New("report").Parse(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Title}}</title>
<style>
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, "Liberation Sans", Arial, sans-serif; color: #1d1d1f; max-width: 70rem; margin: 2rem auto; padding: 0 1rem; line-height: 1.45; }
h1 { font-size: 1.6rem; margin-bottom: .2rem; }
.meta { color: #666; margin-top: 0; }
.charts { display: grid; grid-template-columns: repeat(auto-fit, minmax(28rem, 1fr)); gap: 1rem; }
figure { margin: 0; }
figure svg { width: 100%; height: auto; }
figcaption { color: #555; font-size: .9rem; }
table { border-collapse: collapse; font-variant-numeric: tabular-nums; font-size: .92rem; }
th, td { padding: .25rem .55rem; border-bottom: 1px solid #e2e2e2; text-align: right; white-space: nowrap; }
th:first-child, td:first-child { text-align: left; }
th { background: #f6f6f6; }
.scroll { overflow-x: auto; }
.off { color: #b3261e; font-weight: 600; }
.notes li { margin-bottom: .3rem; }
</style>
</head>
<body>
<h1>{{.Title}}</h1>
{{if not .Generated.IsZero}}<p class="meta">Measured {{.Generated.Format "2006-01-02 15:04 MST"}}</p>{{end}}
{{if .Description}}<p>{{.Description}}</p>{{end}}
<h2>What the numbers say</h2>
<ul>
{{range .Narrative}}<li>{{.}}</li>
{{end}}</ul>
<h2>Charts</h2>
<div class="charts">
{{range .Charts}}<figure>
{{.SVG}}
<figcaption>{{.Caption}}</figcaption>
</figure>
{{end}}</div>
<h2>Results</h2>
<div class="scroll">
<table>
<thead><tr><th>arm</th><th>c</th><th>rps</th><th>mean</th><th>p50</th><th>p95</th><th>p99</th><th>max</th><th>errors</th>
{{if .Timed}}<th>queue</th><th>service</th><th>peak in flight</th><th>peak queued</th><th>limit</th>{{end}}
{{if .Memory}}<th>sidecar memory</th>{{end}}{{if .Upstream}}<th>upstream memory</th>{{end}}<th>physics</th></tr></thead>
<tbody>
{{range .Rows}}<tr><td>{{.Name}}</td>{{range .Cells}}<td>{{.}}</td>{{end}}<td>{{.Errors}}</td>{{range .Sidecar}}<td>{{.}}</td>{{end}}{{if $.Memory}}<td>{{.Memory}}</td>{{end}}{{if $.Upstream}}<td>{{.Upstream}}</td>{{end}}<td>{{if .Note}}<span class="off">off [{{.Note}}]</span>{{else}}ok{{end}}</td></tr>
{{end}}</tbody>
</table>
</div>
{{if .Notes}}<h3>Rows more than 10% off the physics check</h3>
<ol class="notes">
{{range .Notes}}<li>{{.}}</li>
{{end}}</ol>{{end}}
<p class="meta">Physics check: unsaturated, throughput X = C / R (closed loop, C users, mean latency R); saturated, X ≤ N / S (limit N, service time S).</p>
</body>
</html>
`))

// buildCharts draws the report's charts; the sidecar and memory charts only
// when some row has those figures.
func buildCharts(results []Result) ([]chart, error) {
	all := group(results)
	if len(all) == 0 {
		return nil, nil
	}
	multi := false
	for _, s := range all {
		multi = multi || s.scenario != all[0].scenario
	}
	name := func(s series) string {
		if multi && s.scenario != "" {
			return s.scenario + ": " + s.arm
		}
		return s.arm
	}
	levels := levelsOf(results)

	var charts []chart
	add := func(caption string, p *plot.Plot, entries int) error {
		headroom(p, entries)
		svg, err := renderSVG(p)
		if err != nil {
			return fmt.Errorf("chart %q: %w", caption, err)
		}
		charts = append(charts, chart{Caption: caption, SVG: svg})
		return nil
	}

	p := newPlot("Throughput", "concurrency (virtual users)", "successes per second", levels)
	for i, s := range all {
		if err := addLine(p, name(s), i, false, points(s, func(r Result) (float64, bool) { return r.RPS, true })); err != nil {
			return nil, err
		}
	}
	if err := add("Throughput against concurrency, per arm.", p, len(all)); err != nil {
		return nil, err
	}

	p = newPlot("Latency: p50 solid, p99 dashed", "concurrency (virtual users)", "milliseconds", levels)
	for i, s := range all {
		if err := addLine(p, name(s)+" p50", i, false, points(s, func(r Result) (float64, bool) { return ms(r.P50), r.Requests > 0 })); err != nil {
			return nil, err
		}
		if err := addLine(p, name(s)+" p99", i, true, points(s, func(r Result) (float64, bool) { return ms(r.P99), r.Requests > 0 })); err != nil {
			return nil, err
		}
	}
	if err := add("Median and 99th percentile latency against concurrency, per arm.", p, 2*len(all)); err != nil {
		return nil, err
	}

	if p, arms, err := queueServicePlot(all, name); err != nil {
		return nil, err
	} else if arms > 0 {
		if err := add("Where the time goes: mean queue wait in the sidecar (light) under mean service time (dark), per arm and level.", p, 2*arms); err != nil {
			return nil, err
		}
	}

	title := "Resident memory"
	if _, memory, upstream := knownColumns(results); memory && upstream {
		title += ": sidecar solid, upstream dashed"
	}
	p = newPlot(title, "concurrency (virtual users)", "MiB", levels)
	lines := 0
	for i, s := range all {
		for _, m := range []struct {
			who    string
			dashed bool
			bytes  func(Result) int64
		}{
			{"sidecar", false, Result.sidecarMemory},
			{"upstream", true, Result.upstreamMemory},
		} {
			pts := points(s, func(r Result) (float64, bool) {
				b := m.bytes(r)
				return float64(b) / (1 << 20), b > 0
			})
			if len(pts) == 0 {
				continue
			}
			lines++
			if err := addLine(p, name(s)+" "+m.who, i, m.dashed, pts); err != nil {
				return nil, err
			}
		}
	}
	if lines > 0 {
		if err := add("Peak resident memory against concurrency, per arm, where known: the sidecar's process (solid, from its admin endpoint) and the upstream's (dashed).", p, lines); err != nil {
			return nil, err
		}
	}
	return charts, nil
}

func levelsOf(results []Result) []int {
	var levels []int
	for _, r := range results {
		if !slices.Contains(levels, r.Concurrency) {
			levels = append(levels, r.Concurrency)
		}
	}
	slices.Sort(levels)
	return levels
}

// points are an arm's (concurrency, y) pairs, for the rows y has a value.
func points(s series, y func(Result) (float64, bool)) plotter.XYs {
	var xys plotter.XYs
	for _, r := range s.rows {
		if v, ok := y(r); ok {
			xys = append(xys, plotter.XY{X: float64(r.Concurrency), Y: v})
		}
	}
	return xys
}

// newPlot is a plot with concurrency along x, ticked at the levels run, on
// a log scale when they span more than a decade.
func newPlot(title, xLabel, yLabel string, levels []int) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xLabel
	p.Y.Label.Text = yLabel
	p.Y.Min = 0
	p.Legend.Top = true
	p.Legend.Left = true
	sans(p)
	if len(levels) == 0 {
		return p
	}
	var ticks plot.ConstantTicks
	for _, c := range levels {
		ticks = append(ticks, plot.Tick{Value: float64(c), Label: strconv.Itoa(c)})
	}
	p.X.Tick.Marker = ticks
	if levels[len(levels)-1] >= 10*levels[0] && levels[0] > 0 {
		p.X.Scale = plot.LogScale{}
	}
	return p
}

// headroom raises the top of p's y axis so that the legend, drawn in the
// top left corner, sits above the data rather than on it.
func headroom(p *plot.Plot, entries int) {
	p.Y.Max *= 1 + 0.09*float64(entries)
}

// sans draws every text of p in Liberation Sans, which renderSVG names with
// fallbacks every browser has.
func sans(p *plot.Plot) {
	for _, v := range []*font.Variant{
		&p.Title.TextStyle.Font.Variant,
		&p.X.Label.TextStyle.Font.Variant,
		&p.Y.Label.TextStyle.Font.Variant,
		&p.X.Tick.Label.Font.Variant,
		&p.Y.Tick.Label.Font.Variant,
		&p.Legend.TextStyle.Font.Variant,
	} {
		*v = "Sans"
	}
}

func addLine(p *plot.Plot, label string, i int, dashed bool, xys plotter.XYs) error {
	if len(xys) == 0 {
		return nil
	}
	line, dots, err := plotter.NewLinePoints(xys)
	if err != nil {
		return err
	}
	line.LineStyle.Color = plotutil.Color(i)
	line.LineStyle.Width = vg.Points(1.5)
	dots.GlyphStyle.Color = plotutil.Color(i)
	dots.GlyphStyle.Shape = draw.CircleGlyph{}
	dots.GlyphStyle.Radius = vg.Points(2.5)
	if dashed {
		line.LineStyle.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
		dots.GlyphStyle.Shape = draw.RingGlyph{}
	}
	p.Add(line, dots)
	p.Legend.Add(label, line, dots)
	return nil
}

// queueServicePlot stacks each arm's mean queue wait under its mean service
// time, level by level, arms side by side within a level. It returns how
// many arms it drew, 0 when no row has the sidecar's figures.
func queueServicePlot(all []series, name func(series) string) (*plot.Plot, int, error) {
	var timed []series
	for _, s := range all {
		for _, r := range s.rows {
			if r.Sidecar != nil && r.Sidecar.Loomgate {
				timed = append(timed, s)
				break
			}
		}
	}
	if len(timed) == 0 {
		return nil, 0, nil
	}
	var rows []Result
	for _, s := range timed {
		rows = append(rows, s.rows...)
	}
	levels := levelsOf(rows)

	p := plot.New()
	p.Title.Text = "Queue wait and service time"
	p.X.Label.Text = "concurrency (virtual users)"
	p.Y.Label.Text = "milliseconds"
	p.Legend.Top = true
	p.Legend.Left = true
	sans(p)
	labels := make([]string, len(levels))
	for i, c := range levels {
		labels[i] = strconv.Itoa(c)
	}
	p.NominalX(labels...)

	// Bars of one level share about 280 points of a roughly 400-point wide
	// data area, whatever the number of levels and arms.
	width := vg.Points(min(24, 280/float64(len(levels)*len(timed))))
	for k, s := range timed {
		queue := make(plotter.Values, len(levels))
		service := make(plotter.Values, len(levels))
		for _, r := range s.rows {
			if r.Sidecar == nil || !r.Sidecar.Loomgate {
				continue
			}
			i := slices.Index(levels, r.Concurrency)
			queue[i] = ms(r.Sidecar.QueueWait)
			service[i] = ms(r.Sidecar.Service)
		}
		qb, err := plotter.NewBarChart(queue, width)
		if err != nil {
			return nil, 0, err
		}
		sb, err := plotter.NewBarChart(service, width)
		if err != nil {
			return nil, 0, err
		}
		base := plotutil.Color(slices.IndexFunc(all, func(x series) bool { return x.scenario == s.scenario && x.arm == s.arm }))
		qb.Color, sb.Color = lighter(base), base
		qb.LineStyle.Width, sb.LineStyle.Width = 0, 0
		offset := (float64(k) - float64(len(timed)-1)/2) * float64(width)
		qb.Offset, sb.Offset = vg.Length(offset), vg.Length(offset)
		sb.StackOn(qb)
		p.Add(qb, sb)
		p.Legend.Add(name(s)+" queue", qb)
		p.Legend.Add(name(s)+" service", sb)
	}
	return p, len(timed), nil
}

// lighter mixes c with white, for the queue half of a stacked bar.
func lighter(c color.Color) color.Color {
	r, g, b, _ := c.RGBA()
	mix := func(v uint32) uint8 { return uint8((v>>8)*45/100 + 255*55/100) }
	return color.RGBA{R: mix(r), G: mix(g), B: mix(b), A: 255}
}

var (
	// xmlProlog and the comment after it are dropped: an SVG inside HTML
	// starts at its <svg> element.
	xmlProlog = regexp.MustCompile(`(?s)^.*?(<svg\b)`)
	// fontFamily gets fallbacks, since the reader's machine may not have
	// the Liberation fonts the charts were measured with.
	fontFamily = regexp.MustCompile(`font-family:Liberation Sans;`)
)

const fontFallbacks = `font-family:'Liberation Sans',Arial,Helvetica,sans-serif;`

// renderSVG draws p as an SVG element for inlining into HTML.
func renderSVG(p *plot.Plot) (template.HTML, error) {
	wt, err := p.WriterTo(16*vg.Centimeter, 9*vg.Centimeter, "svg")
	if err != nil {
		return "", err
	}
	var buf bytes.Buffer
	if _, err := wt.WriteTo(&buf); err != nil {
		return "", err
	}
	out := xmlProlog.ReplaceAll(buf.Bytes(), []byte("$1"))
	out = fontFamily.ReplaceAll(out, []byte(fontFallbacks))
	// The SVG is drawn here from numbers; no text of it comes from
	// outside but the arm labels, which vgsvg escapes.
	return template.HTML(out), nil
}
