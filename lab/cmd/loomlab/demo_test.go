package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/loomgate/loomgate/lab/bench/report"
)

// TestDemoEndToEnd runs the README's first command, cut down to one small
// level: stub and sidecar in both modes as processes of their own (the
// built binary: under go test this executable is the test's), and bench.
func TestDemoEndToEnd(t *testing.T) {
	saved := scenarioLauncher
	scenarioLauncher = processes{exe: labBinary(t)}
	t.Cleanup(func() { scenarioLauncher = saved })
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	code := runDemo(context.Background(), []string{"-c", "10", "--warmup", "300ms", "--window", "1s", "--out", out}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("demo exit %d\nstdout:\n%s\nstderr:\n%s", code, &stdout, &stderr)
	}
	table := stdout.String()
	for _, want := range []string{"| fixed 200 | 10 |", "| unbounded | 10 |", "| sidecar memory |", "| upstream memory | physics |", "Physics check"} {
		if !strings.Contains(table, want) {
			t.Errorf("demo output lacks %q:\n%s", want, table)
		}
	}
	for _, f := range []string{"results.csv", "results.json", "report.html"} {
		if st, err := os.Stat(filepath.Join(out, f)); err != nil || st.Size() == 0 {
			t.Errorf("report file %s: %v", f, err)
		}
	}
	// The stub ran as a process of its own: its memory was read, as the
	// sidecar's was.
	f, err := os.Open(filepath.Join(out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	results, err := report.ReadJSON(f)
	if err != nil || len(results) != 2 {
		t.Fatalf("results.json: %d results, %v; want 2", len(results), err)
	}
	var cpu bool
	for _, r := range results {
		if r.UpstreamMemoryBytes <= 0 || r.Sidecar == nil || r.Sidecar.MemoryBytes <= 0 {
			t.Errorf("%s c%d: upstream memory %d, sidecar %+v; want both processes' memory", r.Arm, r.Concurrency, r.UpstreamMemoryBytes, r.Sidecar)
			continue
		}
		cpu = cpu || r.Sidecar.CPUPerRequest > 0
	}
	// The sidecar's CPU is read in the kernel's ticks of 10 ms, and at 50
	// requests a second a window of 1 s may hold none: the column is shown
	// where some row has the figure, and only there.
	if shown := strings.Contains(table, "| sidecar memory | sidecar CPU/req | upstream memory |"); shown != cpu {
		t.Errorf("sidecar CPU/req column shown %v, measured %v:\n%s", shown, cpu, table)
	}
}

func TestDemoRejectsArguments(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"now"}, `loomgate demo: unexpected argument "now" (loomgate demo -h)`},
		// A bare number is the usual slip: one line that says what to
		// write, not the flag package's "parse error" and bench's usage.
		{[]string{"--window", "4"}, "loomgate demo: --window 4: a duration needs a unit, as in 4s or 4ms (loomgate demo -h)"},
		{[]string{"--warmup", "soon"}, `loomgate demo: --warmup "soon": want a duration such as 10s, 500ms or 1m (loomgate demo -h)`},
		{[]string{"--window", "0s"}, "loomgate demo: --window 0s: want a duration above 0, e.g. 4s"},
		{[]string{"--windw", "4s"}, "loomgate demo: unknown flag --windw; did you mean --window? (loomgate demo -h)"},
		{[]string{"--levels", "50"}, "loomgate demo: unknown flag --levels (loomgate demo -h)"},
	} {
		var stderr bytes.Buffer
		if code := runDemo(context.Background(), tt.args, &bytes.Buffer{}, &stderr); code != 2 {
			t.Errorf("demo %q = exit %d; want 2", tt.args, code)
		}
		if got := stderr.String(); got != tt.want+"\n" {
			t.Errorf("demo %q said %q; want the one line %q", tt.args, got, tt.want)
		}
	}
}

func TestLabUnknownCommand(t *testing.T) {
	var stderr bytes.Buffer
	if code := run(context.Background(), []string{"bnech"}, nil, &bytes.Buffer{}, &stderr); code != 2 {
		t.Errorf("loomlab bnech = exit %d; want 2", code)
	}
	if want := `loomlab: unknown command "bnech" (did you mean bench?); the commands are demo, bench, stub, proxy, version (loomlab -h for more)` + "\n"; stderr.String() != want {
		t.Errorf("loomlab bnech said %q; want %q", stderr.String(), want)
	}
}
