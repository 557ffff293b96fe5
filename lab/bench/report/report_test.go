package report

import (
	"bytes"
	"github.com/loomgate/loomgate/lab/bench"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestReportIsSelfContained(t *testing.T) {
	results := crossover()
	results[0].Arm = `<script>alert("x")</script>`
	var buf bytes.Buffer
	rep := Report[bench.Result]{Title: "crossover", Description: "fixed 200 against unbounded", Results: results,
		Generated: time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)}
	if err := rep.WriteHTML(&buf); err != nil {
		t.Fatalf("WriteHTML = %v", err)
	}
	html := buf.String()

	if n := strings.Count(html, "<svg"); n != 4 {
		t.Errorf("report has %d inline <svg> charts; want 4 (throughput, latency, queue/service, memory)", n)
	}
	for _, banned := range []string{"<script", "<link", "<img", "<iframe", "@import", "url(", "src=", "<?xml"} {
		if strings.Contains(strings.ToLower(html), banned) {
			t.Errorf("report contains %q; want nothing that loads or runs", banned)
		}
	}
	// The only URLs allowed are SVG's namespace names, which are never
	// fetched, and the targets' own URLs shown as text.
	for _, u := range regexp.MustCompile(`https?://[^\s"'<>)]+`).FindAllString(html, -1) {
		switch {
		case u == "http://www.w3.org/2000/svg", u == "http://www.w3.org/1999/xlink":
		default:
			t.Errorf("report references %s; want no URL but the SVG namespaces", u)
		}
	}
	for _, want := range []string{
		"<title>crossover</title>",
		"Measured 2025-03-01 12:00 UTC",
		"fixed 200 against unbounded",
		"&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;", // the label, escaped in the table
		"Throughput against concurrency",
		"Where the time goes",
		"font-family:'Liberation Sans',Arial,Helvetica,sans-serif;",
		"unbounded reaches 4860 rps at c1000",
		"<th>sidecar memory</th><th>upstream memory</th>",
		"<td>400 MiB</td><td>220 MiB</td>", // unbounded c1000's memory, the sidecar's then the upstream's
		"fixed 200 upstream",               // the upstream's series in the memory chart's legend
		"Upstream memory: under &lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt; the process holds 40 MiB at c100; under fixed 200 it stays near 46 MiB from c200 to c1000",
	} {
		if !strings.Contains(html, want) {
			t.Errorf("report lacks %q", want)
		}
	}
}

func TestReportWithoutSidecar(t *testing.T) {
	var buf bytes.Buffer
	rep := Report[bench.Result]{Results: []bench.Result{
		{Arm: "direct", Concurrency: 1, RPS: 19, Requests: 19, Mean: 52 * time.Millisecond, P50: 51 * time.Millisecond, Window: time.Second},
		{Arm: "direct", Concurrency: 4, RPS: 78, Requests: 78, Mean: 51 * time.Millisecond, P50: 51 * time.Millisecond, Window: time.Second},
	}}
	if err := rep.WriteHTML(&buf); err != nil {
		t.Fatalf("WriteHTML = %v", err)
	}
	if n := strings.Count(buf.String(), "<svg"); n != 2 {
		t.Errorf("report without sidecar or memory has %d charts; want 2", n)
	}
	if !strings.Contains(buf.String(), "<title>loomgate bench</title>") {
		t.Errorf("report without a title lacks the default one")
	}
}

func TestWriteDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out", "nested")
	rep := Report[bench.Result]{Title: "t", Results: crossover()}
	if err := rep.WriteDir(dir); err != nil {
		t.Fatalf("WriteDir = %v", err)
	}
	for _, name := range []string{FileCSV, FileJSON, FileHTML} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || len(b) == 0 {
			t.Errorf("%s: %d bytes, %v; want a file", name, len(b), err)
		}
	}
	f, err := os.Open(filepath.Join(dir, FileJSON))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got, err := ReadJSON(f)
	if err != nil || len(got) != len(rep.Results) {
		t.Errorf("ReadJSON(results.json) = %d results, %v; want %d", len(got), err, len(rep.Results))
	}
}

// TestReportChartsRead: the charts' numbers read as written (5000, not
// 5000.00), a p99 that coincides with its p50 still shows (drawn under it,
// wide and light), and the table's headings wrap so that it fits the
// window or scrolls.
func TestReportChartsRead(t *testing.T) {
	var buf bytes.Buffer
	if err := (Report[bench.Result]{Results: crossover()}).WriteHTML(&buf); err != nil {
		t.Fatal(err)
	}
	html := buf.String()
	if m := regexp.MustCompile(`>-?\d+\.0+<`).FindString(html); m != "" {
		t.Errorf("a chart labels a whole number %s; want it without decimals", m)
	}
	latency := html[strings.Index(html, "Latency: p50 solid"):]
	latency = latency[:strings.Index(latency, "</svg>")]
	// The first arm's p99 is drawn before its p50, wider.
	p99 := strings.Index(latency, "stroke-width:4")
	p50 := strings.Index(latency, "stroke-width:1.5")
	if p99 < 0 || p50 < 0 || p99 > p50 {
		t.Errorf("latency chart: p99 line at %d, p50 line at %d; want the wide p99 drawn first, under the p50", p99, p50)
	}
	for _, want := range []string{"white-space: normal", ".scroll { overflow-x: auto;"} {
		if !strings.Contains(html, want) {
			t.Errorf("report lacks %q, which keeps the table within the window", want)
		}
	}
}

func TestPhysicsSentenceOfOneRow(t *testing.T) {
	got := physicsSentence(crossover()[:1])
	if want := "Physics check: the row is within 10% of C/R and of limit/service."; got != want {
		t.Errorf("physicsSentence(1 row) = %q; want %q", got, want)
	}
}
