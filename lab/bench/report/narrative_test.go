package report

import (
	"strings"
	"testing"
	"time"

	"github.com/loomgate/loomgate/lab/bench"
	"github.com/loomgate/loomgate/lab/bench/scrape"
)

func TestNarrativeCrossover(t *testing.T) {
	got := Narrative(crossover())
	want := []string{
		"fixed 200 pins throughput at 982 rps from c200 on (200 / 0.203 s = 985 rps); from there only latency grows, p50 203 ms at c200 to 1.01 s at c1000.",
		"unbounded reaches 4860 rps at c1000 with p50 204 ms, still climbing at the highest level.",
		"fixed 200 and unbounded diverge from c500 on: at c1000 unbounded serves 4.9× the throughput of fixed 200 (4860 vs 984 rps), with p50 204 ms against 1.01 s.",
		"Upstream memory: under fixed 200 it stays between 40 MiB and 46 MiB from c100 to c1000; under unbounded memory grows from 40 MiB at c100 to 220 MiB at c1000. At c1000 unbounded needs 4.8× the upstream memory of fixed 200: budget memory for peak in flight, or put a bulkhead in front.",
		"Sidecar memory: under fixed 200 memory grows from 60 MiB at c100 to 95 MiB at c1000; under unbounded memory grows from 60 MiB at c100 to 400 MiB at c1000. At c1000 unbounded needs 4.2× the sidecar memory of fixed 200.",
		"Under fixed 200 at c1000 requests wait 811 ms in the sidecar's queue for 203 ms of service: the queue is where latency grows, and the sidecar's queue-time metric shows it.",
		"Physics check: all 8 rows within 10% of C/R and of limit/service.",
	}
	if len(got) != len(want) {
		t.Fatalf("Narrative = %d sentences:\n%s\nwant %d", len(got), strings.Join(got, "\n"), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("sentence %d =\n%s\nwant\n%s", i, got[i], want[i])
		}
	}
}

// synthetic builds a series of rows for an arm from (c, rps, p50, service)
// tuples, checked against cap.
func synthetic(scenario, arm string, cap bench.Capacity, rows ...[4]float64) []bench.Result {
	var out []bench.Result
	for _, r := range rows {
		p50 := time.Duration(r[2] * float64(time.Millisecond))
		res := bench.Result{Scenario: scenario, Arm: arm, Concurrency: int(r[0]), RPS: r[1], Requests: int64(r[1] * 5),
			Window: 5 * time.Second, Mean: p50, P50: p50, P99: p50 * 11 / 10}
		if r[3] > 0 {
			res.Sidecar = &scrape.SidecarStats{Loomgate: true, Service: time.Duration(r[3] * float64(time.Millisecond))}
		}
		res.Physics = res.PhysicsFor(cap).Check()
		out = append(out, res)
	}
	return out
}

func TestNarrativeFindsTheCeilingAndWhy(t *testing.T) {
	pool := bench.Capacity{Limit: 10, Hold: 200 * time.Millisecond}
	results := synthetic("pool", "unbounded, pool 10", pool,
		[4]float64{50, 49.8, 1004, 1004}, [4]float64{100, 50, 2000, 2000}, [4]float64{200, 49.6, 4032, 4032})
	results = append(results, synthetic("pool", "unbounded, pool 100", bench.Capacity{Limit: 100, Hold: 200 * time.Millisecond},
		[4]float64{50, 249, 201, 201}, [4]float64{100, 495, 202, 202}, [4]float64{200, 497, 402, 402})...)
	got := strings.Join(Narrative(results), "\n")
	for _, want := range []string{
		"unbounded, pool 10 pins throughput at 50 rps from c50 on (10 / 0.2 s = 50 rps); from there only latency grows, p50 1.00 s at c50 to 4.03 s at c200.",
		"unbounded, pool 100 pins throughput at 496 rps from c100 on (100 / 0.2 s = 500 rps)",
		"unbounded, pool 10 and unbounded, pool 100 differ at every level: at c200 unbounded, pool 100 serves 10.0× the throughput of unbounded, pool 10 (497 vs 50 rps)",
		"Under unbounded, pool 10 the sidecar admits at once (queue 0 ms at c200) but service time grows from 1.00 s at c50 to 4.03 s: requests wait inside the upstream",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("Narrative lacks\n%s\nin\n%s", want, got)
		}
	}
}

func TestNarrativeSameCeiling(t *testing.T) {
	results := synthetic("cpu", "fixed 200", bench.Capacity{}, [4]float64{8, 1700, 4.7, 0}, [4]float64{128, 1790, 71, 0})
	results = append(results, synthetic("cpu", "unbounded", bench.Capacity{}, [4]float64{8, 1710, 4.7, 0}, [4]float64{128, 1760, 72, 0})...)
	got := strings.Join(Narrative(results), "\n")
	want := "fixed 200 and unbounded stay within 10% of each other at every level (1790 and 1760 rps at c128): what sets them apart is not what limits throughput here."
	if !strings.Contains(got, want) {
		t.Errorf("Narrative lacks\n%s\nin\n%s", want, got)
	}
}

func TestNarrativeReportsFlaggedRows(t *testing.T) {
	results := synthetic("", "target", bench.Capacity{}, [4]float64{4, 80, 50, 0}, [4]float64{100, 1000, 50, 0})
	got := Narrative(results)
	want := "Physics check: 1 of 2 rows are more than 10% off (target c100); see the notes under the table."
	if got[len(got)-1] != want {
		t.Errorf("last sentence = %q; want %q", got[len(got)-1], want)
	}
	if Narrative(nil)[0] != "Physics check: all 0 rows within 10% of C/R and of limit/service." {
		t.Errorf("Narrative(nil) = %q", Narrative(nil))
	}
}

// memRow is a row of an arm at a level with the sidecar's and the
// upstream's memory in MiB, 0 when unknown.
type memRow struct {
	arm                     string
	c                       int
	sidecarMiB, upstreamMiB int64
}

func memoryRows(rows ...memRow) []bench.Result {
	var results []bench.Result
	for _, r := range rows {
		results = append(results, bench.Result{Arm: r.arm, Concurrency: r.c, RPS: 100, Mean: time.Second,
			Sidecar: &scrape.SidecarStats{MemoryBytes: r.sidecarMiB << 20}, UpstreamMemoryBytes: r.upstreamMiB << 20})
	}
	return results
}

// memorySentences are the sentences of Narrative(results) about memory.
func memorySentences(results []bench.Result) []string {
	var out []string
	for _, s := range Narrative(results) {
		if strings.Contains(s, "memory") {
			out = append(out, s)
		}
	}
	return out
}

func TestNarrativeLeavesOutMemoryNoise(t *testing.T) {
	results := memoryRows(memRow{"a", 50, 31, 0}, memRow{"a", 200, 43, 0}, memRow{"b", 50, 44, 0}, memRow{"b", 200, 45, 0})
	if got := memorySentences(results); len(got) > 0 {
		t.Errorf("Narrative reports memory that moved by less than half: %q", got)
	}
	results[3].Sidecar.MemoryBytes = 90 << 20
	if got := strings.Join(Narrative(results), "\n"); !strings.Contains(got, "under b memory grows from 44 MiB at c50 to 90 MiB at c200") {
		t.Errorf("Narrative lacks the doubling of b's memory:\n%s", got)
	}
	// The same for the upstream's.
	results = memoryRows(memRow{"a", 50, 0, 31}, memRow{"a", 200, 0, 43}, memRow{"b", 50, 0, 44}, memRow{"b", 200, 0, 45})
	if got := memorySentences(results); len(got) > 0 {
		t.Errorf("Narrative reports upstream memory that moved by less than half: %q", got)
	}
	results[3].UpstreamMemoryBytes = 90 << 20
	if got := strings.Join(Narrative(results), "\n"); !strings.Contains(got, "Upstream memory: under a memory grows from 31 MiB at c50 to 43 MiB at c200; under b memory grows from 44 MiB at c50 to 90 MiB at c200.") {
		t.Errorf("Narrative lacks the doubling of b's upstream memory:\n%s", got)
	}
}

// The advice that follows a gap in memory is given once: after the
// upstream's memory, where admission shows, or after the sidecar's when the
// upstream's is not known.
func TestNarrativeMemoryAdviceOnce(t *testing.T) {
	const advice = "budget memory for peak in flight, or put a bulkhead in front"
	got := memorySentences(memoryRows(memRow{"fixed", 50, 30, 0}, memRow{"fixed", 500, 32, 0}, memRow{"unbounded", 50, 30, 0}, memRow{"unbounded", 500, 70, 0}))
	want := "Sidecar memory: under fixed it stays between 30 MiB and 32 MiB from c50 to c500; under unbounded memory grows from 30 MiB at c50 to 70 MiB at c500. At c500 unbounded needs 2.2× the sidecar memory of fixed: " + advice + "."
	if len(got) != 1 || got[0] != want {
		t.Errorf("without the upstream's memory, memory sentences = %q; want [%q]", got, want)
	}

	got = memorySentences(memoryRows(memRow{"fixed", 50, 30, 20}, memRow{"fixed", 500, 32, 20}, memRow{"unbounded", 50, 30, 20}, memRow{"unbounded", 500, 70, 100}))
	want0 := "Upstream memory: under fixed it stays near 20 MiB from c50 to c500; under unbounded memory grows from 20 MiB at c50 to 100 MiB at c500. At c500 unbounded needs 5.0× the upstream memory of fixed: " + advice + "."
	want1 := "Sidecar memory: under fixed it stays between 30 MiB and 32 MiB from c50 to c500; under unbounded memory grows from 30 MiB at c50 to 70 MiB at c500. At c500 unbounded needs 2.2× the sidecar memory of fixed."
	if len(got) != 2 || got[0] != want0 || got[1] != want1 {
		t.Errorf("with the upstream's memory, memory sentences =\n%s\nwant\n%s\n%s", strings.Join(got, "\n"), want0, want1)
	}
}
