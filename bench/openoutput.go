package bench

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
)

// openTable is the table of open-loop results, shared by markdown and
// HTML: a header, the rows' cells, and the notes the rows point to.
type openTable struct {
	head  []string
	rows  [][]string
	notes []string
}

func buildOpenTable(results []OpenResult) openTable {
	scenarios := map[string]bool{}
	timed := false
	for _, r := range results {
		scenarios[r.Scenario] = true
		timed = timed || r.Sidecar != nil && r.Sidecar.Loomgate
	}
	multi := len(scenarios) > 1
	var t openTable
	if multi {
		t.head = append(t.head, "scenario")
	}
	t.head = append(t.head, "arm", "rate", "sent/s", "2xx/s", "p50", "p90", "p99", "max",
		"2xx", "503", "504", "other", "errors", "timeouts", "not sent", "Retry-After")
	if timed {
		t.head = append(t.head, "queued start → end", "peak queued", "peak in flight", "rejected", "queue p99 > "+fmtDur(AlertThreshold))
	}
	t.head = append(t.head, "rig")
	for _, r := range results {
		var cells []string
		if multi {
			cells = append(cells, r.Scenario)
		}
		c := r.Counts
		n := func(v int64) string { return strconv.FormatInt(v, 10) }
		cells = append(cells, r.Arm, fmtRate(r.Rate), fmt.Sprintf("%.0f", r.SendRate), fmt.Sprintf("%.0f", r.Throughput),
			fmtDur(r.P50), fmtDur(r.P90), fmtDur(r.P99), fmtDur(r.Max),
			n(c.OK), n(c.Unavailable), n(c.GatewayTime), n(c.OtherStatus), n(c.Errors), n(c.Timeouts), n(c.NotSent),
			r.RetryAfter.String())
		if timed {
			if sc := r.Sidecar; sc != nil && sc.Loomgate {
				alert := "no, max " + fmtDur(sc.QueueP99Max)
				if sc.Alerted {
					alert = fmt.Sprintf("from %.2f s", sc.AlertAt.Seconds())
				}
				cells = append(cells, fmt.Sprintf("%d → %d", sc.QueuedStart, sc.QueuedEnd), strconv.Itoa(sc.PeakQueued),
					strconv.Itoa(sc.PeakInFlight), fmtRejected(sc), alert)
			} else {
				cells = append(cells, "", "", "", "", "")
			}
		}
		verdict := "on time"
		if notes := r.RigNotes(); len(notes) > 0 {
			label := fmt.Sprintf("%s %s rps", r.Arm, fmtRate(r.Rate))
			t.notes = append(t.notes, label+": "+strings.Join(notes, "; "))
			verdict = fmt.Sprintf("off [%d]", len(t.notes))
		}
		cells = append(cells, verdict)
		t.rows = append(t.rows, cells)
	}
	return t
}

// fmtRejected is the sidecar's rejections in the window, by reason:
// "2400 (2000 queue_timeout, 400 queue_full)".
func fmtRejected(sc *OpenSidecar) string {
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

// WriteOpenMarkdown writes open-loop results as a markdown table, one row
// per level, with the rig's shortfalls as numbered notes under it. The
// sidecar's columns appear only when some row has them.
func WriteOpenMarkdown(w io.Writer, results []OpenResult) error {
	t := buildOpenTable(results)
	var b strings.Builder
	row := func(cells []string) {
		b.WriteString("| ")
		b.WriteString(strings.Join(cells, " | "))
		b.WriteString(" |\n")
	}
	row(t.head)
	sep := make([]string, len(t.head))
	for i, h := range t.head {
		sep[i] = "--:"
		if h == "scenario" || h == "arm" || h == "rig" {
			sep[i] = "---"
		}
	}
	row(sep)
	for _, cells := range t.rows {
		row(cells)
	}
	if len(t.notes) > 0 {
		b.WriteString("\nWhere the rig fell short of the schedule:\n")
		for i, n := range t.notes {
			fmt.Fprintf(&b, "%d. %s\n", i+1, n)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// OpenSummary is a few sentences on open-loop results: for each level, the
// throughput against the rate asked for, and where the rest went.
func OpenSummary(results []OpenResult) []string {
	var out []string
	for _, r := range results {
		if r.Due == 0 {
			continue
		}
		s := fmt.Sprintf("%s at %s rps: %.0f 2xx/s", r.Arm, fmtRate(r.Rate), r.Throughput)
		if short := r.Due - r.Counts.OK; short > 0 {
			s += fmt.Sprintf(", %.0f%% of the requests due did not succeed (%s)", 100*float64(short)/float64(r.Due), r.Counts.brief())
		} else {
			s += ", every request due succeeded"
		}
		s += fmt.Sprintf("; p99 %s from the time each was due", fmtDur(r.P99))
		if sc := r.Sidecar; sc != nil && sc.Loomgate {
			s += fmt.Sprintf("; the sidecar held up to %d in flight and %d queued", sc.PeakInFlight, sc.PeakQueued)
			if sc.Alerted {
				s += fmt.Sprintf(", and %s's expression crossed %s %.1f s into the load", AlertName, fmtDur(AlertThreshold), sc.AlertAt.Seconds())
			}
		}
		out = append(out, s+".")
	}
	return out
}

// openRecord is the flat form of an OpenResult for JSON and CSV;
// durations in milliseconds.
type openRecord struct {
	Scenario    string  `json:"scenario"`
	Arm         string  `json:"arm"`
	URL         string  `json:"url"`
	Rate        float64 `json:"rate"`
	WindowS     float64 `json:"window_s"`
	MaxInFlight int     `json:"max_in_flight"`
	Due         int64   `json:"due"`
	Sent        int64   `json:"sent"`
	SendRate    float64 `json:"send_rate"`
	Late        int64   `json:"late"`
	SendLagP99  float64 `json:"send_lag_p99_ms"`
	SendLagMax  float64 `json:"send_lag_max_ms"`
	Throughput  float64 `json:"throughput"`
	P50MS       float64 `json:"p50_ms"`
	P90MS       float64 `json:"p90_ms"`
	P99MS       float64 `json:"p99_ms"`
	MaxMS       float64 `json:"max_ms"`

	OK          int64 `json:"ok"`
	Unavailable int64 `json:"status_503"`
	GatewayTime int64 `json:"status_504"`
	OtherStatus int64 `json:"status_other"`
	Errors      int64 `json:"errors"`
	Timeouts    int64 `json:"timeouts"`
	NotSent     int64 `json:"not_sent"`

	RetryAfterN      int64 `json:"retry_after_n"`
	RetryAfterMin    int64 `json:"retry_after_min_s"`
	RetryAfterMedian int64 `json:"retry_after_median_s"`
	RetryAfterMax    int64 `json:"retry_after_max_s"`

	PeakInFlight int `json:"rig_peak_in_flight"`

	Sidecar *openSidecarRecord `json:"sidecar"`
}

type openSidecarRecord struct {
	Loomgate     bool             `json:"loomgate"`
	Limit        int              `json:"limit"`
	QueuedStart  int              `json:"queued_start"`
	QueuedEnd    int              `json:"queued_end"`
	PeakQueued   int              `json:"peak_queued"`
	PeakInFlight int              `json:"peak_in_flight"`
	Outcomes     map[string]int64 `json:"outcomes"`
	QueueP99Max  float64          `json:"queue_p99_max_ms"`
	Alerted      bool             `json:"alert_crossed"`
	AlertAtS     float64          `json:"alert_at_s"`
	Timeline     []queuePointRec  `json:"timeline"`
}

type queuePointRec struct {
	AtS       float64 `json:"at_s"`
	Queued    int     `json:"queued"`
	QueuedMax int     `json:"queued_max"`
	InFlight  int     `json:"in_flight"`
	QueueP99  float64 `json:"queue_p99_ms"`
}

func toOpenRecord(r OpenResult) openRecord {
	c := r.Counts
	rec := openRecord{
		Scenario: r.Scenario, Arm: r.Arm, URL: r.URL, Rate: r.Rate, WindowS: r.Window.Seconds(), MaxInFlight: r.MaxInFlight,
		Due: r.Due, Sent: r.Sent, SendRate: r.SendRate, Late: r.Late, SendLagP99: ms(r.SendLagP99), SendLagMax: ms(r.SendLagMax),
		Throughput: r.Throughput, P50MS: ms(r.P50), P90MS: ms(r.P90), P99MS: ms(r.P99), MaxMS: ms(r.Max),
		OK: c.OK, Unavailable: c.Unavailable, GatewayTime: c.GatewayTime, OtherStatus: c.OtherStatus,
		Errors: c.Errors, Timeouts: c.Timeouts, NotSent: c.NotSent,
		RetryAfterN: r.RetryAfter.N, RetryAfterMin: r.RetryAfter.Min, RetryAfterMedian: r.RetryAfter.Median, RetryAfterMax: r.RetryAfter.Max,
		PeakInFlight: r.PeakInFlight,
	}
	if sc := r.Sidecar; sc != nil {
		s := &openSidecarRecord{
			Loomgate: sc.Loomgate, Limit: sc.Limit, QueuedStart: sc.QueuedStart, QueuedEnd: sc.QueuedEnd,
			PeakQueued: sc.PeakQueued, PeakInFlight: sc.PeakInFlight, Outcomes: sc.Outcomes,
			QueueP99Max: ms(sc.QueueP99Max), Alerted: sc.Alerted, AlertAtS: sc.AlertAt.Seconds(),
		}
		for _, p := range sc.Timeline {
			s.Timeline = append(s.Timeline, queuePointRec{AtS: p.At.Seconds(), Queued: p.Queued, QueuedMax: p.QueuedMax, InFlight: p.InFlight, QueueP99: ms(p.QueueP99)})
		}
		rec.Sidecar = s
	}
	return rec
}

// WriteOpenJSON writes open-loop results as an indented JSON array, one
// object per level, durations in milliseconds (fields ending _ms) and
// seconds (_s), the sidecar's readings under "sidecar" (null without one).
func WriteOpenJSON(w io.Writer, results []OpenResult) error {
	recs := make([]openRecord, len(results))
	for i, r := range results {
		recs[i] = toOpenRecord(r)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(recs)
}

// openCSVColumns is the header of an open-loop results.csv. Columns are
// only ever added at the end.
var openCSVColumns = []string{
	"scenario", "arm", "url", "rate", "window_s", "max_in_flight", "due", "sent", "send_rate", "late",
	"send_lag_p99_ms", "send_lag_max_ms", "throughput", "p50_ms", "p90_ms", "p99_ms", "max_ms",
	"ok", "status_503", "status_504", "status_other", "errors", "timeouts", "not_sent",
	"retry_after_n", "retry_after_min_s", "retry_after_median_s", "retry_after_max_s", "rig_peak_in_flight",
	"sidecar_loomgate", "limit", "queued_start", "queued_end", "peak_queued", "peak_in_flight",
	"rejected", "queue_p99_max_ms", "alert_crossed", "alert_at_s",
}

// WriteOpenCSV writes open-loop results with a header line; the sidecar's
// columns are empty for rows without one. The sidecar's readings over
// time are in the JSON only.
func WriteOpenCSV(w io.Writer, results []OpenResult) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(openCSVColumns); err != nil {
		return err
	}
	i64 := func(v int64) string { return strconv.FormatInt(v, 10) }
	for _, r := range results {
		rec := toOpenRecord(r)
		line := []string{
			rec.Scenario, rec.Arm, rec.URL, fmtFloat(rec.Rate), fmtFloat(rec.WindowS), strconv.Itoa(rec.MaxInFlight),
			i64(rec.Due), i64(rec.Sent), fmtFloat(rec.SendRate), i64(rec.Late), fmtFloat(rec.SendLagP99), fmtFloat(rec.SendLagMax),
			fmtFloat(rec.Throughput), fmtFloat(rec.P50MS), fmtFloat(rec.P90MS), fmtFloat(rec.P99MS), fmtFloat(rec.MaxMS),
			i64(rec.OK), i64(rec.Unavailable), i64(rec.GatewayTime), i64(rec.OtherStatus), i64(rec.Errors), i64(rec.Timeouts), i64(rec.NotSent),
			i64(rec.RetryAfterN), i64(rec.RetryAfterMin), i64(rec.RetryAfterMedian), i64(rec.RetryAfterMax), strconv.Itoa(rec.PeakInFlight),
		}
		if sc := r.Sidecar; sc != nil {
			line = append(line, strconv.FormatBool(sc.Loomgate), strconv.Itoa(sc.Limit), strconv.Itoa(sc.QueuedStart), strconv.Itoa(sc.QueuedEnd),
				strconv.Itoa(sc.PeakQueued), strconv.Itoa(sc.PeakInFlight), i64(sc.Rejected()), fmtFloat(ms(sc.QueueP99Max)),
				strconv.FormatBool(sc.Alerted), fmtFloat(sc.AlertAt.Seconds()))
		} else {
			line = append(line, "", "", "", "", "", "", "", "", "", "")
		}
		if err := cw.Write(line); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// OpenReport is what OpenReport.WriteDir writes: the open-loop
// counterpart of Report.
type OpenReport struct {
	// Title heads the report. If empty, "loomgate bench".
	Title string
	// Description, if set, is a paragraph under the title.
	Description string
	// Generated, if set, is printed as the time the results were taken.
	Generated time.Time
	Results   []OpenResult
}

// WriteDir writes results.csv, results.json and report.html into dir,
// creating it if needed.
func (rep OpenReport) WriteDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, f := range []struct {
		name  string
		write func(io.Writer) error
	}{
		{FileCSV, func(w io.Writer) error { return WriteOpenCSV(w, rep.Results) }},
		{FileJSON, func(w io.Writer) error { return WriteOpenJSON(w, rep.Results) }},
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

// WriteHTML writes the report as one self-contained page, as
// Report.WriteHTML does: the summary, the charts as inline SVG, the table.
func (rep OpenReport) WriteHTML(w io.Writer) error {
	if rep.Title == "" {
		rep.Title = "loomgate bench"
	}
	charts, err := buildOpenCharts(rep.Results)
	if err != nil {
		return err
	}
	t := buildOpenTable(rep.Results)
	return openReportTemplate.Execute(w, struct {
		OpenReport
		Summary []string
		Charts  []chart
		Table   openTable
	}{rep, OpenSummary(rep.Results), charts, t})
}

var openReportTemplate = template.Must(template.New("open").Parse(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Title}}</title>
<style>
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, "Liberation Sans", Arial, sans-serif; color: #1d1d1f; max-width: 80rem; margin: 2rem auto; padding: 0 1rem; line-height: 1.45; }
h1 { font-size: 1.6rem; margin-bottom: .2rem; }
.meta { color: #666; margin-top: 0; }
.charts { display: grid; grid-template-columns: repeat(auto-fit, minmax(28rem, 1fr)); gap: 1rem; }
figure { margin: 0; }
figure svg { width: 100%; height: auto; }
figcaption { color: #555; font-size: .9rem; }
table { border-collapse: collapse; font-variant-numeric: tabular-nums; font-size: .88rem; }
th, td { padding: .25rem .5rem; border-bottom: 1px solid #e2e2e2; text-align: right; white-space: nowrap; }
th:first-child, td:first-child { text-align: left; }
th { background: #f6f6f6; }
.scroll { overflow-x: auto; }
</style>
</head>
<body>
<h1>{{.Title}}</h1>
{{if not .Generated.IsZero}}<p class="meta">Measured {{.Generated.Format "2006-01-02 15:04 MST"}}</p>{{end}}
{{if .Description}}<p>{{.Description}}</p>{{end}}
<h2>What the numbers say</h2>
<ul>
{{range .Summary}}<li>{{.}}</li>
{{end}}</ul>
{{if .Charts}}<h2>Charts</h2>
<div class="charts">
{{range .Charts}}<figure>
{{.SVG}}
<figcaption>{{.Caption}}</figcaption>
</figure>
{{end}}</div>{{end}}
<h2>Results</h2>
<div class="scroll">
<table>
<thead><tr>{{range .Table.Head}}<th>{{.}}</th>{{end}}</tr></thead>
<tbody>
{{range .Table.Rows}}<tr>{{range .}}<td>{{.}}</td>{{end}}</tr>
{{end}}</tbody>
</table>
</div>
{{if .Table.Notes}}<h3>Where the rig fell short of the schedule</h3>
<ol>
{{range .Table.Notes}}<li>{{.}}</li>
{{end}}</ol>{{end}}
<p class="meta">Open loop: requests are sent at the rate asked for whether or not earlier ones were answered, and latency counts from the time each was due. Counts are of the requests due in the window.</p>
</body>
</html>
`))

// Head, Rows and Notes expose the table to the template.
func (t openTable) Head() []string   { return t.head }
func (t openTable) Rows() [][]string { return t.rows }
func (t openTable) Notes() []string  { return t.notes }

// buildOpenCharts draws throughput against the rate asked for, per arm,
// and the sidecar's queue over time, per arm and rate.
func buildOpenCharts(results []OpenResult) ([]chart, error) {
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
		if err := addLine(q, fmt.Sprintf("%s %s rps", r.Arm, fmtRate(r.Rate)), lines, slices.Index(arms, r.Arm) > 0, xys); err != nil {
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
