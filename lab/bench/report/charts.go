package report

import (
	"bytes"
	"fmt"
	"html/template"
	"image/color"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/loomgate/loomgate/lab/bench"
	"github.com/loomgate/loomgate/lab/bench/internal/format"
)

// chart is one figure of the page: an inline SVG and its caption.
type chart struct {
	Caption string
	SVG     template.HTML
}

// charts collects a page's charts.
type charts []chart

// add draws p, with room above its data for a legend of entries lines.
func (cs *charts) add(caption string, p *plot.Plot, entries int) error {
	headroom(p, entries)
	svg, err := renderSVG(p)
	if err != nil {
		return fmt.Errorf("chart %q: %w", caption, err)
	}
	*cs = append(*cs, chart{Caption: caption, SVG: svg})
	return nil
}

// closedCharts draws a closed-loop report's charts; the sidecar and
// memory charts only when some row has those figures.
func closedCharts(results []bench.Result) ([]chart, error) {
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

	var charts charts
	add := charts.add

	p := newPlot("Throughput", "concurrency (virtual users)", "successes per second", levels)
	for i, s := range all {
		if err := addLine(p, name(s), i, false, points(s, func(r bench.Result) (float64, bool) { return r.RPS, true })); err != nil {
			return nil, err
		}
	}
	if err := add("Throughput against concurrency, per arm.", p, len(all)); err != nil {
		return nil, err
	}

	p = newPlot("Latency: p50 solid, p99 dashed", "concurrency (virtual users)", "milliseconds", levels)
	for i, s := range all {
		// A fixed pool's p99 is about its p50: the p99 goes under, wide
		// and light, so that the p50 on it leaves both in sight.
		if err := addPair(p, i,
			lineSpec{name(s) + " p50", points(s, func(r bench.Result) (float64, bool) { return ms(r.P50), r.Requests > 0 })},
			lineSpec{name(s) + " p99", points(s, func(r bench.Result) (float64, bool) { return ms(r.P99), r.Requests > 0 })}); err != nil {
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
		var pair [2]lineSpec
		for k, m := range []struct {
			who   string
			bytes func(bench.Result) int64
		}{
			{"sidecar", sidecarMemory},
			{"upstream", upstreamMemory},
		} {
			pair[k] = lineSpec{name(s) + " " + m.who, points(s, func(r bench.Result) (float64, bool) {
				b := m.bytes(r)
				return float64(b) / (1 << 20), b > 0
			})}
			if len(pair[k].xys) > 0 {
				lines++
			}
		}
		if err := addPair(p, i, pair[0], pair[1]); err != nil {
			return nil, err
		}
	}
	if lines > 0 {
		if err := add("Peak resident memory against concurrency, per arm, where known: the sidecar's process (solid, from its admin endpoint) and the upstream's (dashed).", p, lines); err != nil {
			return nil, err
		}
	}
	return charts, nil
}

func levelsOf(results []bench.Result) []int {
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
func points(s series, y func(bench.Result) (float64, bool)) plotter.XYs {
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
	p.Y.Tick.Marker = plainTicks{}
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
	// Room past the last level for its tick label, which would otherwise
	// be cut at the chart's edge.
	first, last := float64(levels[0]), float64(levels[len(levels)-1])
	p.X.Max = last + (last-first)*0.04
	if last >= 10*first && first > 0 {
		p.X.Scale = plot.LogScale{}
		p.X.Max = last * math.Pow(last/first, 0.04)
	}
	return p
}

// plainTicks are the default ticks, labelled without trailing zeros:
// 5000, not 5000.00.
type plainTicks struct{}

func (plainTicks) Ticks(min, max float64) []plot.Tick {
	ticks := plot.DefaultTicks{}.Ticks(min, max)
	for i, t := range ticks {
		if strings.Contains(t.Label, ".") && !strings.ContainsAny(t.Label, "eE") {
			ticks[i].Label = strings.TrimSuffix(strings.TrimRight(t.Label, "0"), ".")
		}
	}
	return ticks
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
	line, dots, err := newLine(i, dashed, xys)
	if err != nil || line == nil {
		return err
	}
	p.Add(line, dots)
	p.Legend.Add(label, line, dots)
	return nil
}

// lineSpec is one line of a chart: its legend label and its points.
type lineSpec struct {
	label string
	xys   plotter.XYs
}

// addPair draws two lines of one series, the first solid, the second
// dashed: the dashed one first, so that where they coincide the solid
// one lies on it and both show. The legend lists them in their order.
func addPair(p *plot.Plot, i int, solid, dashed lineSpec) error {
	sl, sd, err := newLine(i, false, solid.xys)
	if err != nil {
		return err
	}
	dl, dd, err := newLine(i, true, dashed.xys)
	if err != nil {
		return err
	}
	if dl != nil {
		p.Add(dl, dd)
	}
	if sl != nil {
		p.Add(sl, sd)
		p.Legend.Add(solid.label, sl, sd)
	}
	if dl != nil {
		p.Legend.Add(dashed.label, dl, dd)
	}
	return nil
}

// newLine is a line with a marker at each point in the i-th colour: solid
// and thin with dots, or dashed, wide and light with rings, which a solid
// line on top of it leaves visible. nil when there are no points.
func newLine(i int, dashed bool, xys plotter.XYs) (*plotter.Line, *plotter.Scatter, error) {
	if len(xys) == 0 {
		return nil, nil, nil
	}
	line, dots, err := plotter.NewLinePoints(xys)
	if err != nil {
		return nil, nil, err
	}
	line.LineStyle.Color = plotutil.Color(i)
	line.LineStyle.Width = vg.Points(1.5)
	dots.GlyphStyle.Color = plotutil.Color(i)
	dots.GlyphStyle.Shape = draw.CircleGlyph{}
	dots.GlyphStyle.Radius = vg.Points(2.5)
	if dashed {
		line.LineStyle.Color = lighter(plotutil.Color(i))
		line.LineStyle.Width = vg.Points(4)
		line.LineStyle.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}
		dots.GlyphStyle.Shape = draw.RingGlyph{}
		dots.GlyphStyle.Radius = vg.Points(4.5)
	}
	return line, dots, nil
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
	var rows []bench.Result
	for _, s := range timed {
		rows = append(rows, s.rows...)
	}
	levels := levelsOf(rows)

	p := plot.New()
	p.Title.Text = "Queue wait and service time"
	p.X.Label.Text = "concurrency (virtual users)"
	p.Y.Label.Text = "milliseconds"
	p.Y.Tick.Marker = plainTicks{}
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

// openCharts draws throughput against the rate asked for, per arm,
// and the sidecar's queue over time, per arm and rate.
func openCharts(results []bench.OpenResult) ([]chart, error) {
	if len(results) == 0 {
		return nil, nil
	}
	var arms []string
	var rates []int
	for _, r := range results {
		if !slices.Contains(arms, r.Arm) {
			arms = append(arms, r.Arm)
		}
		if v := int(math.Round(r.Rate)); !slices.Contains(rates, v) {
			rates = append(rates, v)
		}
	}
	slices.Sort(rates)
	var charts charts
	add := charts.add

	p := newPlot("Throughput", "intended rate (requests per second)", "2xx per second", rates)
	for i, arm := range arms {
		var xys plotter.XYs
		for _, r := range results {
			if r.Arm == arm {
				xys = append(xys, plotter.XY{X: r.Rate, Y: r.Throughput})
			}
		}
		slices.SortFunc(xys, func(a, b plotter.XY) int { return int(a.X - b.X) })
		if err := addLine(p, arm, i, false, xys); err != nil {
			return nil, err
		}
	}
	if err := add("Successes per second against the rate asked for, per arm.", p, len(arms)); err != nil {
		return nil, err
	}

	q := plot.New()
	q.Title.Text = "Sidecar queue"
	q.X.Label.Text = "seconds from the start of the load"
	q.Y.Label.Text = "loomgate_queued"
	q.Y.Min = 0
	q.Y.Tick.Marker = plainTicks{}
	q.Legend.Top, q.Legend.Left = true, true
	sans(q)
	lines := 0
	for _, r := range results {
		sc := r.Sidecar
		if sc == nil || !sc.Loomgate || len(sc.Timeline) == 0 {
			continue
		}
		var xys plotter.XYs
		for _, pt := range sc.Timeline {
			xys = append(xys, plotter.XY{X: pt.At.Seconds(), Y: float64(pt.Queued)})
		}
		if err := addLine(q, fmt.Sprintf("%s %s rps", r.Arm, format.Rate(r.Rate)), lines, slices.Index(arms, r.Arm) > 0, xys); err != nil {
			return nil, err
		}
		lines++
	}
	if lines > 0 {
		if err := add("Requests waiting in the sidecar's queue over each run, per arm and rate.", q, lines); err != nil {
			return nil, err
		}
	}
	return charts, nil
}
