package report

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/loomgate/loomgate/lab/bench"
	"github.com/loomgate/loomgate/lab/bench/scrape"
)

// crossover is a synthetic crossover scenario shaped like the published
// figures: fixed 200 pins at 200 / 0.203 s, unbounded keeps scaling; the
// upstream's memory stays where 200 requests put it under fixed 200 and
// grows with the requests in flight under unbounded.
func crossover() []bench.Result {
	ms := time.Millisecond
	row := func(arm string, c int, rps float64, p50 time.Duration, sc *scrape.SidecarStats, upstreamMiB int64) bench.Result {
		r := bench.Result{
			Scenario: "crossover", Arm: arm, URL: "http://127.0.0.1:8080/wait?ms=200",
			Concurrency: c, Window: 5 * time.Second, Requests: int64(rps * 5), RPS: rps,
			Mean: p50 + 2*ms, P50: p50, P95: p50 + 10*ms, P99: p50 + 20*ms, Max: p50 + 50*ms,
			Sidecar: sc, UpstreamMemoryBytes: upstreamMiB << 20,
		}
		r.Physics = r.PhysicsFor(bench.Capacity{}).Check()
		return r
	}
	fixed := func(queue time.Duration, peakQueued int, mem int64) *scrape.SidecarStats {
		return &scrape.SidecarStats{Loomgate: true, QueueWait: queue, Service: 203 * ms, PeakInFlight: 200, PeakQueued: peakQueued, Limit: 200, MemoryBytes: mem}
	}
	unbounded := func(peak int, mem int64) *scrape.SidecarStats {
		return &scrape.SidecarStats{Loomgate: true, QueueWait: 20 * time.Microsecond, Service: 202 * ms, PeakInFlight: peak, MemoryBytes: mem}
	}
	return []bench.Result{
		row("fixed 200", 100, 490, 202*ms, fixed(0, 0, 60<<20), 40),
		row("fixed 200", 200, 978, 203*ms, fixed(time.Millisecond, 3, 80<<20), 44),
		row("fixed 200", 500, 985, 505*ms, fixed(300*ms, 300, 90<<20), 45),
		row("fixed 200", 1000, 984, 1014*ms, fixed(811*ms, 800, 95<<20), 46),
		row("unbounded", 100, 491, 202*ms, unbounded(100, 60<<20), 40),
		row("unbounded", 200, 980, 202*ms, unbounded(200, 80<<20), 44),
		row("unbounded", 500, 2440, 203*ms, unbounded(500, 180<<20), 110),
		row("unbounded", 1000, 4860, 204*ms, unbounded(1000, 400<<20), 220),
	}
}

func TestCSVRoundTrip(t *testing.T) {
	results := crossover()
	// A row without a sidecar, an odd label and a flagged verdict.
	results = append(results, bench.Result{
		Arm: `my "service", v2`, URL: "http://127.0.0.1:9/x?a=1,b", Concurrency: 3,
		Window: 1500 * time.Millisecond, Requests: 7, RPS: 4.666666666666667,
		Mean: 1234567 * time.Microsecond, P50: time.Second, P95: 2 * time.Second, P99: 3 * time.Second, Max: 4 * time.Second,
		Errors:  bench.Errors{Status: 1, Timeout: 2, Connect: 3},
		Physics: bench.Physics{Concurrency: 3, RPS: 4.666666666666667, Mean: 1234567 * time.Microsecond, Errors: 6}.Check(),
	})
	results[0].Sidecar.CPUPerRequest = 37*time.Microsecond + 500*time.Nanosecond
	var buf bytes.Buffer
	if err := WriteCSV(&buf, results); err != nil {
		t.Fatalf("WriteCSV = %v", err)
	}
	got, err := ReadCSV(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatalf("ReadCSV = %v\n%s", err, buf.String())
	}
	if !reflect.DeepEqual(got, results) {
		t.Errorf("ReadCSV(WriteCSV(results)) differs:\ngot  %+v\nwant %+v", got, results)
	}
	if header, _, _ := strings.Cut(buf.String(), "\n"); !strings.HasPrefix(header, "scenario,arm,url,concurrency,window_s,requests,rps,mean_ms,p50_ms") {
		t.Errorf("CSV header = %q; want it to start with the documented columns", header)
	}
}

// A results.csv written before the upstream's memory and the sidecar's CPU
// were columns still reads, both unknown.
func TestReadCSVWithoutUpstreamMemory(t *testing.T) {
	results := crossover()
	results[0].Sidecar.CPUPerRequest = 40 * time.Microsecond
	var buf bytes.Buffer
	if err := WriteCSV(&buf, results); err != nil {
		t.Fatal(err)
	}
	var old strings.Builder
	for line := range strings.Lines(buf.String()) {
		for range 2 {
			line = line[:strings.LastIndexByte(line, ',')]
		}
		old.WriteString(line + "\n")
	}
	if !strings.HasSuffix(strings.SplitN(old.String(), "\n", 2)[0], ",physics_reason") {
		t.Fatalf("header after dropping the last column = %q; want it to end at physics_reason", strings.SplitN(old.String(), "\n", 2)[0])
	}
	got, err := ReadCSV(strings.NewReader(old.String()))
	if err != nil {
		t.Fatalf("ReadCSV of a file without upstream_memory_bytes = %v", err)
	}
	for i := range results {
		results[i].UpstreamMemoryBytes = 0
	}
	results[0].Sidecar.CPUPerRequest = 0
	if !reflect.DeepEqual(got, results) {
		t.Errorf("ReadCSV without upstream_memory_bytes differs:\ngot  %+v\nwant %+v", got, results)
	}
}

func TestJSONRoundTrip(t *testing.T) {
	results := crossover()
	results[0].Physics.Flagged, results[0].Physics.Reason = true, "synthetic"
	var buf bytes.Buffer
	if err := WriteJSON(&buf, results); err != nil {
		t.Fatalf("WriteJSON = %v", err)
	}
	got, err := ReadJSON(&buf)
	if err != nil {
		t.Fatalf("ReadJSON = %v", err)
	}
	if !reflect.DeepEqual(got, results) {
		t.Errorf("ReadJSON(WriteJSON(results)) differs:\ngot  %+v\nwant %+v", got, results)
	}
}

func TestJSONFields(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteJSON(&buf, crossover()[3:4]); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"concurrency": 1000`, `"rps": 984`, `"p50_ms": 1014`, `"queue_ms": 811`, `"limit": 200`, `"memory_bytes": 99614720`, `"upstream_memory_bytes": 48234496`, `"physics_flagged": false`} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("WriteJSON output has no %s:\n%s", want, buf.String())
		}
	}
	buf.Reset()
	if err := WriteJSON(&buf, []bench.Result{{Arm: "x"}}); err != nil || !strings.Contains(buf.String(), `"sidecar": null`) ||
		!strings.Contains(buf.String(), `"upstream_memory_bytes": 0`) {
		t.Errorf("WriteJSON without a sidecar = %v\n%s; want \"sidecar\": null, \"upstream_memory_bytes\": 0", err, buf.String())
	}
}

func TestReadCSVErrors(t *testing.T) {
	var good bytes.Buffer
	if err := WriteCSV(&good, crossover()[:1]); err != nil {
		t.Fatal(err)
	}
	header, line, _ := strings.Cut(good.String(), "\n")
	tests := []struct {
		name, in, want string
	}{
		{"empty", "", "header"},
		{"missing column", "scenario,arm\n", "header has no url column"},
		{"bad number", header + "\n" + strings.Replace(line, ",100,", ",lots,", 1), `line 2: concurrency "lots"`},
		{"ragged line", header + "\nonly,three,cells\n", "wrong number of fields"},
	}
	for _, tt := range tests {
		_, err := ReadCSV(strings.NewReader(tt.in))
		if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ReadCSV(%s) = %v; want ErrFormat mentioning %q", tt.name, err, tt.want)
		}
	}
	if _, err := ReadJSON(strings.NewReader("{")); !errors.Is(err, ErrFormat) {
		t.Errorf("ReadJSON(\"{\") = %v; want ErrFormat", err)
	}
}

func TestMarkdownFlagsRows(t *testing.T) {
	results := crossover()
	results[1].Physics = bench.Physics{Concurrency: 200, RPS: 600, Mean: 203 * time.Millisecond}.Check()
	var buf bytes.Buffer
	if err := WriteMarkdown(&buf, results); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{
		"| arm | c | rps | mean | p50 | p95 | p99 | max | errors | queue | service | peak in flight | peak queued | limit | sidecar memory | upstream memory | physics |",
		"| fixed 200 | 200 | 978 | 205 ms | 203 ms | 213 ms | 223 ms | 253 ms | 0 | 1.00 ms | 203 ms | 200 | 3 | 200 | 80 MiB | 44 MiB | off [1] |",
		"| unbounded | 1000 | 4860 | 206 ms | 204 ms | 214 ms | 224 ms | 254 ms | 0 | 0.02 ms | 202 ms | 1000 | 0 | none | 400 MiB | 220 MiB | ok |",
		"Rows more than 10% off the physics check:\n1. fixed 200 c200: 600 rps is 39% below C/R = 200 / 203 ms = 985 rps",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("WriteMarkdown output lacks\n%s\nin\n%s", want, out)
		}
	}
}

func TestMarkdownWithoutSidecar(t *testing.T) {
	var buf bytes.Buffer
	r := bench.Result{Arm: "127.0.0.1:8081/wait?ms=50", Concurrency: 4, RPS: 79.6, Mean: 50200 * time.Microsecond,
		Errors: bench.Errors{Status: 2, Connect: 1}}
	r.Physics = r.PhysicsFor(bench.Capacity{}).Check()
	if err := WriteMarkdown(&buf, []bench.Result{r}); err != nil {
		t.Fatal(err)
	}
	want := "| arm | c | rps | mean | p50 | p95 | p99 | max | errors | physics |\n" +
		"| --- | --: | --: | --: | --: | --: | --: | --: | --: | --: |\n" +
		"| 127.0.0.1:8081/wait?ms=50 | 4 | 80 | 50 ms | 0 ms | 0 ms | 0 ms | 0 ms | 3 (2 status, 1 connect) | ok |\n"
	if got := buf.String(); got != want {
		t.Errorf("WriteMarkdown =\n%s\nwant\n%s", got, want)
	}
}

// Each memory column appears when some row knows it, its cell empty in rows
// that do not.
func TestMarkdownMemoryColumns(t *testing.T) {
	sidecarOnly := bench.Result{Arm: "a", Concurrency: 1, Sidecar: &scrape.SidecarStats{MemoryBytes: 30 << 20}}
	upstreamOnly := bench.Result{Arm: "b", Concurrency: 2, UpstreamMemoryBytes: 12 << 20}
	tests := []struct {
		results    []bench.Result
		head, body string
	}{
		{[]bench.Result{sidecarOnly, upstreamOnly}, "| arm | c | rps | mean | p50 | p95 | p99 | max | errors | sidecar memory | upstream memory | physics |",
			"| a | 1 | 0 | 0 ms | 0 ms | 0 ms | 0 ms | 0 ms | 0 | 30 MiB |  | ok |\n| b | 2 | 0 | 0 ms | 0 ms | 0 ms | 0 ms | 0 ms | 0 |  | 12 MiB | ok |\n"},
		{[]bench.Result{sidecarOnly}, "| arm | c | rps | mean | p50 | p95 | p99 | max | errors | sidecar memory | physics |",
			"| a | 1 | 0 | 0 ms | 0 ms | 0 ms | 0 ms | 0 ms | 0 | 30 MiB | ok |\n"},
		{[]bench.Result{upstreamOnly}, "| arm | c | rps | mean | p50 | p95 | p99 | max | errors | upstream memory | physics |",
			"| b | 2 | 0 | 0 ms | 0 ms | 0 ms | 0 ms | 0 ms | 0 | 12 MiB | ok |\n"},
	}
	for _, tt := range tests {
		var buf bytes.Buffer
		if err := WriteMarkdown(&buf, tt.results); err != nil {
			t.Fatal(err)
		}
		head, rest, _ := strings.Cut(buf.String(), "\n")
		_, body, _ := strings.Cut(rest, "\n")
		if head != tt.head || body != tt.body {
			t.Errorf("WriteMarkdown =\n%s\nwant\n%s\n(separator)\n%s", buf.String(), tt.head, tt.body)
		}
	}
}

// FuzzReadCSV feeds arbitrary files to ReadCSV, as a results.csv edited by
// hand may be: it must fail cleanly, and what it accepts must write back.
func FuzzReadCSV(f *testing.F) {
	var good bytes.Buffer
	if err := WriteCSV(&good, crossover()[:2]); err != nil {
		f.Fatal(err)
	}
	f.Add(good.String())
	f.Add(strings.Join(csvColumns, ",") + "\n")
	f.Add("scenario\n\"unterminated")
	f.Fuzz(func(t *testing.T, in string) {
		results, err := ReadCSV(strings.NewReader(in))
		if err != nil {
			if !errors.Is(err, ErrFormat) {
				t.Errorf("ReadCSV error %v; want ErrFormat", err)
			}
			return
		}
		var out bytes.Buffer
		if err := WriteCSV(&out, results); err != nil {
			t.Errorf("WriteCSV of what ReadCSV accepted: %v", err)
		}
		back, err := ReadCSV(&out)
		if err != nil || len(back) != len(results) {
			t.Errorf("ReadCSV(WriteCSV(ReadCSV(in))) = %d results, %v; want %d", len(back), err, len(results))
		}
	})
}
