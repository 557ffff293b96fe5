package report

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/loomgate/loomgate/lab/bench"
	"github.com/loomgate/loomgate/lab/bench/scrape"
)

func openResults() []bench.OpenResult {
	ms := time.Millisecond
	return []bench.OpenResult{
		{Scenario: "open", Arm: "fixed 200", Rate: 3000, Window: 5 * time.Second, MaxInFlight: 3333,
			Due: 15000, Sent: 15000, SendRate: 2998, Throughput: 1000,
			P50: 1190 * ms, P90: 1200 * ms, P99: 1210 * ms, Max: 1250 * ms,
			Counts:     bench.OpenCounts{OK: 5000, Unavailable: 10000},
			RetryAfter: bench.RetryAfter{N: 10000, Min: 1, Median: 1, Max: 1},
			Sidecar: &scrape.OpenSidecar{Loomgate: true, Limit: 200, QueuedStart: 2000, QueuedEnd: 2000, PeakQueued: 2000, PeakInFlight: 200,
				Outcomes:    map[string]int64{"ok": 5000, "rejected_queue_full": 7000, "rejected_queue_timeout": 3000},
				QueueP99Max: time.Second, Alerted: true, AlertAt: 500 * ms,
				Timeline: []scrape.QueuePoint{{At: 0}, {At: 250 * ms, Queued: 500, QueuedMax: 520, InFlight: 200, QueueP99: 240 * ms}}}},
		{Scenario: "open", Arm: "unbounded", Rate: 3000, Window: 5 * time.Second, MaxInFlight: 3333,
			Due: 15000, Sent: 14000, SendRate: 2800, Late: 900, SendLagMax: 40 * ms, Throughput: 2800,
			P50: 202 * ms, P90: 205 * ms, P99: 230 * ms, Max: 260 * ms,
			Counts:  bench.OpenCounts{OK: 14000, NotSent: 1000},
			Sidecar: &scrape.OpenSidecar{Loomgate: true, PeakInFlight: 610, Outcomes: map[string]int64{"ok": 14000}, QueueP99Max: 0}},
	}
}

func ExampleWriteMarkdown_open() {
	ms := time.Millisecond
	WriteMarkdown(os.Stdout, []bench.OpenResult{
		{Arm: "127.0.0.1:8081/wait?ms=1", Rate: 1000, Window: 5 * time.Second, Due: 5000, Sent: 5000, SendRate: 1000, Throughput: 1000,
			P50: 1100 * time.Microsecond, P90: 1300 * time.Microsecond, P99: 2 * ms, Max: 9 * ms, Counts: bench.OpenCounts{OK: 5000}},
		{Arm: "127.0.0.1:8081/wait?ms=1", Rate: 6000, Window: 5 * time.Second, Due: 30000, Sent: 30000, SendRate: 5880, Throughput: 5880,
			P50: 1200 * time.Microsecond, P90: 4 * ms, P99: 30 * ms, Max: 80 * ms, Counts: bench.OpenCounts{OK: 29400, Timeouts: 600}},
	})
	// Output:
	// | arm | rate | sent/s | 2xx/s | p50 | p90 | p99 | max | 2xx | 503 | 504 | other | errors | timeouts | not sent | Retry-After | rig |
	// | --- | --: | --: | --: | --: | --: | --: | --: | --: | --: | --: | --: | --: | --: | --: | --: | --- |
	// | 127.0.0.1:8081/wait?ms=1 | 1000 | 1000 | 1000 | 1.10 ms | 1.30 ms | 2.00 ms | 9.00 ms | 5000 | 0 | 0 | 0 | 0 | 0 | 0 |  | on time |
	// | 127.0.0.1:8081/wait?ms=1 | 6000 | 5880 | 5880 | 1.20 ms | 4.00 ms | 30 ms | 80 ms | 29400 | 0 | 0 | 0 | 0 | 600 | 0 |  | off [1] |
	//
	// Where the rig fell short of the schedule:
	// 1. 127.0.0.1:8081/wait?ms=1 6000 rps: sent 5880.0/s, 2% below the intended 6000/s
}

func TestWriteOpenMarkdownWithSidecar(t *testing.T) {
	var b strings.Builder
	if err := WriteMarkdown(&b, openResults()); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| queued start → end | peak queued | peak in flight | rejected | queue p99 > 250 ms | rig |",
		"| fixed 200 | 3000 | 2998 | 1000 | 1.19 s | 1.20 s | 1.21 s | 1.25 s | 5000 | 10000 | 0 | 0 | 0 | 0 | 0 | 1 s | 2000 → 2000 | 2000 | 200 | 10000 (7000 queue_full, 3000 queue_timeout) | from 0.50 s | on time |",
		"| unbounded | 3000 | 2800 | 2800 | 202 ms |",
		"| 0 → 0 | 0 | 610 | 0 | no, max 0 ms | off [1] |",
		"1. unbounded 3000 rps: sent 2800.0/s, 7% below the intended 3000/s; 900 of 14000 sends (6%) went out more than 10 ms late, up to 40 ms; 1000 requests not sent: 3333 already in flight, the cap",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
	sum := strings.Join(OpenSummary(openResults()), "\n")
	for _, want := range []string{
		"fixed 200 at 3000 rps: 1000 2xx/s, 67% of the requests due did not succeed (5000 2xx, 10000 503); p99 1.21 s from the time each was due; the sidecar held up to 200 in flight and 2000 queued, and LoomgateQueueTimeHigh's expression crossed 250 ms 0.5 s into the load.",
		"unbounded at 3000 rps: 2800 2xx/s, 7% of the requests due did not succeed (14000 2xx, 1000 not sent)",
	} {
		if !strings.Contains(sum, want) {
			t.Errorf("summary lacks %q:\n%s", want, sum)
		}
	}
}

func TestOpenReportFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	results := openResults()
	results[0].Arm = `<script>alert("x")</script>`
	rep := Report[bench.OpenResult]{Title: "open", Description: "fixed against unbounded", Results: results, Generated: time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)}
	if err := rep.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	html, err := os.ReadFile(filepath.Join(dir, FileHTML))
	if err != nil {
		t.Fatal(err)
	}
	page := string(html)
	if n := strings.Count(page, "<svg"); n != 2 {
		t.Errorf("report has %d charts; want 2 (throughput, queue)", n)
	}
	for _, banned := range []string{"<script", "<link", "<img", "<iframe", "@import", "url(", "src="} {
		if strings.Contains(strings.ToLower(page), banned) {
			t.Errorf("report contains %q; want nothing that loads or runs", banned)
		}
	}
	for _, u := range regexp.MustCompile(`https?://[^\s"'<>)]+`).FindAllString(page, -1) {
		if u != "http://www.w3.org/2000/svg" && u != "http://www.w3.org/1999/xlink" {
			t.Errorf("report references %s", u)
		}
	}
	for _, want := range []string{"<title>open</title>", "Measured 2025-03-01 12:00 UTC", "<th>queue p99 &gt; 250 ms</th>", "<td>from 0.50 s</td>", "&lt;script&gt;"} {
		if !strings.Contains(page, want) {
			t.Errorf("report lacks %q", want)
		}
	}

	var recs []openRecord
	b, _ := os.ReadFile(filepath.Join(dir, FileJSON))
	if err := json.Unmarshal(b, &recs); err != nil || len(recs) != 2 {
		t.Fatalf("results.json: %v, %d records", err, len(recs))
	}
	if r := recs[0]; r.Rate != 3000 || r.Unavailable != 10000 || r.Sidecar == nil || r.Sidecar.AlertAtS != 0.5 ||
		len(r.Sidecar.Timeline) != 2 || r.Sidecar.Timeline[1].QueueP99 != 240 || r.Sidecar.Outcomes["rejected_queue_full"] != 7000 {
		t.Errorf("results.json record %+v", r)
	}

	f, _ := os.Open(filepath.Join(dir, FileCSV))
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil || len(rows) != 3 || len(rows[0]) != len(openCSVColumns) {
		t.Fatalf("results.csv: %v, %d rows", err, len(rows))
	}
	col := map[string]int{}
	for i, c := range rows[0] {
		col[c] = i
	}
	if rows[1][col["rejected"]] != "10000" || rows[2][col["not_sent"]] != "1000" || rows[1][col["alert_at_s"]] != "0.5" {
		t.Errorf("results.csv rows %v", rows[1:])
	}
}

func TestWriteOpenMarkdownEmptyRow(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteMarkdown(&buf, []bench.OpenResult{{Arm: "x", Rate: 1}}); err != nil || !strings.Contains(buf.String(), "| x | 1 | 0 | 0 | 0 ms |") {
		t.Errorf("a row with nothing measured: %v\n%s", err, buf.String())
	}
	if s := OpenSummary([]bench.OpenResult{{Arm: "x", Rate: 1}}); len(s) != 0 {
		t.Errorf("summary of nothing due = %q; want none", s)
	}
}
