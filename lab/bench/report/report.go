// Package report writes what the load rig measured, for both kinds of run:
// a markdown table with a few plain sentences under it, results.csv,
// results.json and a self-contained HTML page with charts. One writer
// serves closed-loop results (bench.Result) and open-loop results
// (bench.OpenResult); what differs between them, their columns, their
// records, their sentences and their charts, is data of each kind.
package report

import (
	"bytes"
	"fmt"
	"html/template"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/loomgate/loomgate/lab/bench"
)

// Row is a result of either kind of run.
type Row interface {
	bench.Result | bench.OpenResult
}

// Report is what WriteHTML and WriteDir write.
type Report[R Row] struct {
	// Title heads the report. If empty, "loomgate bench".
	Title string
	// Description, if set, is a paragraph under the title, e.g. the
	// scenario's description.
	Description string
	// Generated, if set, is printed as the time the results were taken.
	Generated time.Time
	Results   []R
}

// File names WriteDir writes.
const (
	FileCSV  = "results.csv"
	FileJSON = "results.json"
	FileHTML = "report.html"
)

// column is one column of a kind's table.
type column[R any] struct {
	head string
	// left aligns the column left in markdown.
	left bool
	// when says whether rows have the column at all; nil: always.
	when func(rows []R) bool
	cell func(r R) string
}

// verdict is a kind's last column: whether the row can be trusted, and if
// not, a numbered note under the table saying why.
type verdict[R any] struct {
	head, ok string
	left     bool
	// note is why r is off, "" when it is not.
	note func(r R) string
	// notes heads the notes under the table.
	notes string
	// highlight marks an off row's cell on the page.
	highlight bool
}

// kind is what sets one kind of result apart in every format.
type kind[R Row] struct {
	scenario, arm func(R) string
	columns       []column[R]
	verdict       verdict[R]
	// mergeScenario: the page names a row "scenario: arm" in its first
	// column instead of giving the scenario a column of its own.
	mergeScenario bool

	summary func([]R) []string
	charts  func([]R) ([]chart, error)
	csv     func([]R) [][]string
	json    func([]R) any

	page page
}

// page is a kind's look on the HTML page.
type page struct {
	Width, Font, Pad string
	Footer           string
}

// kindOf is R's kind.
func kindOf[R Row]() kind[R] {
	if k, ok := any(closedKind()).(kind[R]); ok {
		return k
	}
	return any(openKind()).(kind[R])
}

// table is a kind's table over some rows, in markdown or on the page.
type table struct {
	Head  []string
	left  []bool
	Rows  [][]cell
	Notes []string
}

type cell struct {
	Text string
	Off  bool
}

func buildTable[R Row](rows []R, html bool) table {
	k := kindOf[R]()
	scenarios := map[string]bool{}
	for _, r := range rows {
		scenarios[k.scenario(r)] = true
	}
	multi := len(scenarios) > 1
	var cols []column[R]
	if multi && !(html && k.mergeScenario) {
		cols = append(cols, column[R]{head: "scenario", left: true, cell: k.scenario})
	}
	arm := column[R]{head: "arm", left: true, cell: k.arm}
	if multi && html && k.mergeScenario {
		arm.cell = func(r R) string {
			if s := k.scenario(r); s != "" {
				return s + ": " + k.arm(r)
			}
			return k.arm(r)
		}
	}
	cols = append(cols, arm)
	for _, c := range k.columns {
		if c.when == nil || c.when(rows) {
			cols = append(cols, c)
		}
	}
	var t table
	for _, c := range cols {
		t.Head, t.left = append(t.Head, c.head), append(t.left, c.left)
	}
	t.Head, t.left = append(t.Head, k.verdict.head), append(t.left, k.verdict.left)
	for _, r := range rows {
		var cells []cell
		for _, c := range cols {
			cells = append(cells, cell{Text: c.cell(r)})
		}
		v := cell{Text: k.verdict.ok}
		if note := k.verdict.note(r); note != "" {
			t.Notes = append(t.Notes, note)
			v = cell{Text: fmt.Sprintf("off [%d]", len(t.Notes)), Off: k.verdict.highlight}
		}
		t.Rows = append(t.Rows, append(cells, v))
	}
	return t
}

// WriteMarkdown writes rows as a markdown table, one row per run, with the
// reasons of rows that are off as numbered notes under it. Columns that no
// row has (a sidecar's, a memory's) are left out.
func WriteMarkdown[R Row](w io.Writer, rows []R) error {
	t := buildTable(rows, false)
	var b strings.Builder
	line := func(cells []string) {
		b.WriteString("| ")
		b.WriteString(strings.Join(cells, " | "))
		b.WriteString(" |\n")
	}
	line(t.Head)
	sep := make([]string, len(t.Head))
	for i := range sep {
		sep[i] = "--:"
		if t.left[i] {
			sep[i] = "---"
		}
	}
	line(sep)
	for _, r := range t.Rows {
		cells := make([]string, len(r))
		for i, c := range r {
			cells[i] = c.Text
		}
		line(cells)
	}
	if len(t.Notes) > 0 {
		fmt.Fprintf(&b, "\n%s:\n", kindOf[R]().verdict.notes)
		for i, n := range t.Notes {
			fmt.Fprintf(&b, "%d. %s\n", i+1, n)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// Summary is a few plain sentences on rows: for closed-loop results the
// narrative (the ceiling each arm found and why, where the arms diverge,
// memory, the physics check), for open-loop results what became of each
// rate's requests.
func Summary[R Row](rows []R) []string { return kindOf[R]().summary(rows) }

// WriteDir writes results.csv, results.json and report.html into dir,
// creating it if needed.
func (rep Report[R]) WriteDir(dir string) error {
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
// sentences, the charts as inline SVG and the table. It loads nothing: no
// script, stylesheet, font or image from anywhere, so it opens offline.
func (rep Report[R]) WriteHTML(w io.Writer) error {
	if rep.Title == "" {
		rep.Title = "loomgate bench"
	}
	k := kindOf[R]()
	charts, err := k.charts(rep.Results)
	if err != nil {
		return err
	}
	return pageTemplate.Execute(w, struct {
		Title, Description string
		Generated          time.Time
		Summary            []string
		Charts             []chart
		Table              table
		NotesHead          string
		Page               page
	}{rep.Title, rep.Description, rep.Generated, k.summary(rep.Results), charts, buildTable(rep.Results, true), k.verdict.notes, k.page})
}

var pageTemplate = template.Must(template.New("report").Parse(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Title}}</title>
<style>
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, "Liberation Sans", Arial, sans-serif; color: #1d1d1f; max-width: {{.Page.Width}}; margin: 2rem auto; padding: 0 1rem; line-height: 1.45; }
h1 { font-size: 1.6rem; margin-bottom: .2rem; }
.meta { color: #666; margin-top: 0; }
.charts { display: grid; grid-template-columns: repeat(auto-fit, minmax(28rem, 1fr)); gap: 1rem; }
figure { margin: 0; }
figure svg { width: 100%; height: auto; }
figcaption { color: #555; font-size: .9rem; }
table { border-collapse: collapse; font-variant-numeric: tabular-nums; font-size: {{.Page.Font}}; }
th, td { padding: {{.Page.Pad}}; border-bottom: 1px solid #e2e2e2; text-align: right; white-space: nowrap; }
th:first-child, td:first-child { text-align: left; }
th { background: #f6f6f6; white-space: normal; vertical-align: bottom; }
/* The table may be wider than the text: as wide as the window allows,
   centred on the text, its headings wrapped, and scrolled beyond. */
.scroll { overflow-x: auto; width: max-content; max-width: calc(100vw - 2rem); margin-left: 50%; transform: translateX(-50%); }
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
{{range .Table.Rows}}<tr>{{range .}}<td>{{if .Off}}<span class="off">{{.Text}}</span>{{else}}{{.Text}}{{end}}</td>{{end}}</tr>
{{end}}</tbody>
</table>
</div>
{{if .Table.Notes}}<h3>{{.NotesHead}}</h3>
<ol class="notes">
{{range .Table.Notes}}<li>{{.}}</li>
{{end}}</ol>{{end}}
<p class="meta">{{.Page.Footer}}</p>
</body>
</html>
`))
