package bench

import (
	"context"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/loomgate/loomgate/stub"
)

func TestOpenScenarios(t *testing.T) {
	if got := OpenScenarioNames(); !reflect.DeepEqual(got, []string{"open"}) {
		t.Fatalf("OpenScenarioNames() = %v", got)
	}
	for _, name := range OpenScenarioNames() {
		for _, closed := range ScenarioNames() {
			if name == closed {
				t.Errorf("%s is both an open and a closed scenario", name)
			}
		}
	}
	sc, ok := LookupOpenScenario("open")
	if !ok || sc.Path != "/wait?ms=200" || !reflect.DeepEqual(sc.Rates, []float64{800, 1200, 3000}) || len(sc.Arms) != 2 ||
		sc.Arms[0].Sidecar != (Sidecar{Mode: "fixed", Workers: 200, QueueSize: 2000, QueueTimeout: time.Second}) ||
		sc.Arms[1].Sidecar.Mode != "unbounded" || sc.Description == "" {
		t.Fatalf("open = %+v; want fixed 200 vs unbounded on /wait?ms=200 at 800, 1200, 3000 rps", sc)
	}
	// What each run holds in flight, by Little's law, must fit under the
	// rig's cap and, at 4 descriptors a request, the open-file limit of
	// 20000 with room to spare.
	const service = 0.2
	for _, arm := range sc.Arms {
		for _, rate := range sc.Rates {
			inFlight := rate * service
			if s := arm.Sidecar; s.Mode == "fixed" {
				inFlight = min(rate*(service+s.QueueTimeout.Seconds()), float64(s.Workers+s.QueueSize))
			}
			if inFlight > float64(20000/(DescriptorsPerRequest+2)) || DescriptorsPerRequest*inFlight > 10000 {
				t.Errorf("%s at %v rps holds about %.0f in flight; want under the default cap and half the open-file limit", arm.Label, rate, inFlight)
			}
		}
	}
	// At 1200 rps the fixed queue's wait grows by 1/6 s per second; it
	// must reach the queue timeout inside the window.
	if grow := sc.Arms[0].Sidecar.QueueTimeout.Seconds() * 6; grow >= (sc.Warmup + sc.Window).Seconds() {
		t.Errorf("the fixed queue reaches its timeout %.0f s into the load, after the window", grow)
	}
	if _, ok := LookupOpenScenario("crossover"); ok {
		t.Errorf("LookupOpenScenario found a closed-loop scenario")
	}
	OpenScenarios()[0].Rates[0] = -1
	if OpenScenarios()[0].Rates[0] != 800 {
		t.Errorf("OpenScenarios() shares its slices between calls")
	}
}

func TestRunOpenScenarioLaunchesEachRate(t *testing.T) {
	sc := OpenScenario{
		Name: "tiny", Path: "/wait?ms=5", Rates: []float64{1000},
		Arms:   []Arm{{Label: "a"}, {Label: "b", Stub: stub.Config{Pool: 2}}},
		Warmup: time.Minute, Window: time.Minute, // overridden below
	}
	l := &stubLauncher{t: t}
	var progress strings.Builder
	results, err := RunOpenScenario(context.Background(), sc, l, OpenScenarioOptions{
		Rates: []float64{50, 200}, Warmup: 100 * time.Millisecond, Window: 500 * time.Millisecond, Progress: &progress,
	})
	if err != nil {
		t.Fatalf("RunOpenScenario = %v", err)
	}
	if want := []string{"a", "a", "b", "b"}; !reflect.DeepEqual(l.launched, want) || l.stopped != 4 || len(results) != 4 {
		t.Fatalf("launched %v, stopped %d, %d results; want %v, each stopped", l.launched, l.stopped, len(results), want)
	}
	for i, want := range []struct {
		arm       string
		rate, rps float64
	}{
		{"a", 50, 50}, {"a", 200, 200},
		// A hidden pool of 2 at 5 ms serves 400 rps: both rates fit.
		{"b", 50, 50}, {"b", 200, 200},
	} {
		r := results[i]
		if r.Scenario != "tiny" || r.Arm != want.arm || r.Rate != want.rate || r.Window != 500*time.Millisecond {
			t.Errorf("result %d = %s/%s %v rps over %v", i, r.Scenario, r.Arm, r.Rate, r.Window)
		}
		if math.Abs(r.Throughput/want.rps-1) > 0.1 || r.Counts.OK != r.Due {
			t.Errorf("%s %v rps: %.1f 2xx/s, counts %+v; want all %d due answered", r.Arm, r.Rate, r.Throughput, r.Counts, r.Due)
		}
	}
	if !strings.Contains(progress.String(), "[4/4] tiny b 200 rps: ") {
		t.Errorf("progress lacks the run count:\n%s", progress.String())
	}

	if _, err := RunOpenScenario(context.Background(), sc, nil, OpenScenarioOptions{}); !errors.Is(err, ErrNoLauncher) {
		t.Errorf("without a launcher = %v; want ErrNoLauncher", err)
	}
	boom := errors.New("no ports left")
	failing := LauncherFunc(func(context.Context, Arm) (Target, func(), error) { return Target{}, nil, boom })
	if _, err := RunOpenScenario(context.Background(), sc, failing, OpenScenarioOptions{}); !errors.Is(err, boom) ||
		!strings.Contains(err.Error(), "[1/2] tiny a 1000 rps: launch") {
		t.Errorf("with a failing launcher = %v; want its error with the run", err)
	}
}
