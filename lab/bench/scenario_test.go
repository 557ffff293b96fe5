package bench

import (
	"context"
	"errors"
	"math"
	"net"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/loomgate/loomgate/lab/stub"
	"github.com/loomgate/loomgate/lab/stub/stubtest"
)

// stubLauncher starts only the stub an arm describes, on a loopback port,
// and points traffic straight at it: no sidecar, so no AdminURL.
type stubLauncher struct {
	t        *testing.T
	mu       sync.Mutex
	launched []string // arm labels, in launch order
	stopped  int
}

func (l *stubLauncher) Launch(ctx context.Context, arm Arm) (Target, func(), error) {
	s, err := stub.New(arm.Stub)
	if err != nil {
		return Target{}, nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return Target{}, nil, err
	}
	go s.Serve(ln)
	l.mu.Lock()
	l.launched = append(l.launched, arm.Label)
	l.mu.Unlock()
	stop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			l.t.Errorf("stub shutdown: %v", err)
		}
		l.mu.Lock()
		l.stopped++
		l.mu.Unlock()
	}
	return Target{URL: "http://" + ln.Addr().String()}, stop, nil
}

func TestRunScenarioLaunchesEachLevel(t *testing.T) {
	hold := 50 * time.Millisecond
	sc := Scenario{
		Name: "tinypool",
		Path: "/db?ms=50",
		// Levels are overridden below; these must not run.
		Levels: []int{100, 200},
		Arms: []Arm{
			{Label: "pool 1", Stub: stub.Config{DBPool: 1}, Capacity: Capacity{Limit: 1, Hold: hold}},
			{Label: "pool 4", Stub: stub.Config{DBPool: 4}, Capacity: Capacity{Limit: 4, Hold: hold}},
		},
		Warmup: time.Minute, Window: time.Minute, // overridden too
	}
	l := &stubLauncher{t: t}
	var progress strings.Builder
	results, err := RunScenario(context.Background(), sc, l, ScenarioOptions{
		Levels: []int{1, 4}, Warmup: 200 * time.Millisecond, Window: 600 * time.Millisecond, Progress: &progress,
	})
	if err != nil {
		t.Fatalf("RunScenario = %v", err)
	}
	if want := []string{"pool 1", "pool 1", "pool 4", "pool 4"}; !reflect.DeepEqual(l.launched, want) || l.stopped != 4 {
		t.Errorf("launched %v, stopped %d; want %v, each stopped", l.launched, l.stopped, want)
	}
	if len(results) != 4 {
		t.Fatalf("RunScenario returned %d results; want 4", len(results))
	}
	for i, want := range []struct {
		arm        string
		c          int
		lo, hi     float64 // rps
		ceiling    float64
		saturation bool
	}{
		// One connection held 50 ms: 20 rps whatever the concurrency.
		{"pool 1", 1, 12, 22, 20, false},
		{"pool 1", 4, 12, 22, 20, true},
		// Four connections: 20 rps per user up to 80.
		{"pool 4", 1, 12, 22, 80, false},
		{"pool 4", 4, 50, 85, 80, false},
	} {
		r := results[i]
		if r.Scenario != "tinypool" || r.Arm != want.arm || r.Concurrency != want.c {
			t.Errorf("result %d = %s/%s c%d; want tinypool/%s c%d", i, r.Scenario, r.Arm, r.Concurrency, want.arm, want.c)
		}
		if r.RPS < want.lo || r.RPS > want.hi {
			t.Errorf("%s c%d: %.1f rps; want %v..%v", r.Arm, r.Concurrency, r.RPS, want.lo, want.hi)
		}
		if r.Physics.Ceiling != want.ceiling {
			t.Errorf("%s c%d: physics ceiling %v; want %v from the arm's capacity", r.Arm, r.Concurrency, r.Physics.Ceiling, want.ceiling)
		}
		if want.saturation && r.Physics.Expected != want.ceiling {
			t.Errorf("%s c%d: physics expects %.1f rps; want the ceiling %v, since c%d exceeds the pool", r.Arm, r.Concurrency, r.Physics.Expected, want.ceiling, r.Concurrency)
		}
		if r.Sidecar != nil {
			t.Errorf("%s c%d: sidecar stats %+v without a sidecar; want nil", r.Arm, r.Concurrency, r.Sidecar)
		}
		if r.Window != 600*time.Millisecond {
			t.Errorf("%s c%d: window %v; want the overridden 600ms", r.Arm, r.Concurrency, r.Window)
		}
	}
	if !strings.Contains(progress.String(), "[4/4] tinypool pool 4 c4: ") {
		t.Errorf("progress lacks the level count:\n%s", progress.String())
	}
}

func TestRunScenarioErrors(t *testing.T) {
	sc, _ := LookupScenario("crossover")
	if _, err := RunScenario(context.Background(), sc, nil, ScenarioOptions{}); !errors.Is(err, ErrNoLauncher) {
		t.Errorf("RunScenario without a launcher = %v; want ErrNoLauncher", err)
	}
	boom := errors.New("no ports left")
	failing := LauncherFunc(func(context.Context, Arm) (Target, func(), error) { return Target{}, nil, boom })
	_, err := RunScenario(context.Background(), sc, failing, ScenarioOptions{})
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "[1/12] crossover fixed 200 c50: launch") {
		t.Errorf("RunScenario with a failing launcher = %v; want the launcher's error with the level", err)
	}
}

func TestScenarios(t *testing.T) {
	want := []string{"crossover", "fairfight", "pool", "cpu", "memory", "hidden", "grpc", "h2c", "protocols", "open"}
	if got := ScenarioNames(); !reflect.DeepEqual(got, want) {
		t.Fatalf("ScenarioNames() = %v; want %v", got, want)
	}
	for _, sc := range Scenarios() {
		if sc.Open() {
			continue // TestOpenScenarios
		}
		if len(sc.Arms) < 2 || len(sc.Levels) < 2 || sc.Warmup <= 0 || sc.Window <= 0 || sc.Description == "" {
			t.Errorf("%s: %d arms, levels %v, warm-up %v, window %v; want a complete scenario", sc.Name, len(sc.Arms), sc.Levels, sc.Warmup, sc.Window)
		}
		for _, c := range sc.Levels {
			// The rig, the sidecar's two sides and the stub each hold a
			// descriptor per user; the machine allows 20000.
			if c < 1 || 4*c > 10000 {
				t.Errorf("%s: level %d; want 1..2500 to stay within the open-file limit", sc.Name, c)
			}
		}
		for _, a := range sc.Arms {
			if _, err := stub.New(a.Stub); err != nil || a.Label == "" {
				t.Errorf("%s: arm %q stub config: %v", sc.Name, a.Label, err)
			}
		}
	}
	crossover, ok := LookupScenario("crossover")
	if !ok || crossover.Path != "/wait?ms=200" || !reflect.DeepEqual(crossover.Levels, []int{50, 100, 200, 500, 1000, 2000}) ||
		crossover.Arms[0].Sidecar != (Sidecar{Mode: "fixed", Workers: 200}) || crossover.Arms[1].Sidecar.Mode != "unbounded" {
		t.Errorf("crossover = %+v; want fixed 200 vs unbounded on /wait?ms=200 at c50..2000", crossover)
	}
	if _, ok := LookupScenario("nope"); ok {
		t.Errorf("LookupScenario(nope) found something")
	}
	// Callers may change what they get without changing the next caller's.
	Scenarios()[0].Levels[0] = -1
	if Scenarios()[0].Levels[0] != 50 {
		t.Errorf("Scenarios() shares its slices between calls")
	}
}

func TestScenarioPathsAreValidStubRequests(t *testing.T) {
	base := stubtest.Start(t, stub.Config{})
	var wg sync.WaitGroup
	for _, sc := range Scenarios() {
		wg.Go(func() {
			resp, err := http.Get(base + sc.Path)
			if err != nil {
				t.Errorf("%s: GET %s: %v", sc.Name, sc.Path, err)
				return
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Errorf("%s: GET %s = %d; want 200", sc.Name, sc.Path, resp.StatusCode)
			}
		})
	}
	wg.Wait()
}

func TestSidecarEnviron(t *testing.T) {
	tests := []struct {
		s    Sidecar
		want []string
	}{
		{Sidecar{}, []string{"LOOMGATE_MODE=unbounded"}},
		{Sidecar{Mode: "fixed", Workers: 200}, []string{"LOOMGATE_MODE=fixed", "LOOMGATE_WORKERS=200"}},
		{Sidecar{Mode: "fixed", Workers: 10, QueueSize: 50, QueueTimeout: 1500 * time.Millisecond},
			[]string{"LOOMGATE_MODE=fixed", "LOOMGATE_WORKERS=10", "LOOMGATE_QUEUE_SIZE=50", "LOOMGATE_QUEUE_TIMEOUT=1.5s"}},
		{Sidecar{Mode: "unbounded", Bulkhead: 300}, []string{"LOOMGATE_MODE=unbounded", "LOOMGATE_BULKHEAD=300"}},
	}
	for _, tt := range tests {
		if got := tt.s.Environ(); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%+v.Environ() = %v; want %v", tt.s, got, tt.want)
		}
	}
}

func TestOpenScenarios(t *testing.T) {
	var open []string
	seen := map[string]bool{}
	for _, sc := range Scenarios() {
		if sc.Open() {
			open = append(open, sc.Name)
			if len(sc.Levels) != 0 {
				t.Errorf("%s has both rates and levels", sc.Name)
			}
		}
		if seen[sc.Name] {
			t.Errorf("%s is in the table twice", sc.Name)
		}
		seen[sc.Name] = true
	}
	if !reflect.DeepEqual(open, []string{"open"}) {
		t.Fatalf("open-loop scenarios = %v", open)
	}
	sc, ok := LookupScenario("open")
	if !ok || !sc.Open() || sc.Path != "/wait?ms=200" || !reflect.DeepEqual(sc.Rates, []float64{800, 1200, 3000}) || len(sc.Arms) != 2 ||
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
	if crossover, _ := LookupScenario("crossover"); crossover.Open() {
		t.Errorf("crossover reads as an open-loop scenario")
	}
	last := len(Scenarios()) - 1
	Scenarios()[last].Rates[0] = -1
	if Scenarios()[last].Rates[0] != 800 {
		t.Errorf("Scenarios() shares its rates between calls")
	}
}

func TestRunOpenScenarioLaunchesEachRate(t *testing.T) {
	sc := Scenario{
		Name: "tiny", Path: "/wait?ms=5", Rates: []float64{1000},
		Arms:   []Arm{{Label: "a"}, {Label: "b", Stub: stub.Config{Pool: 2}}},
		Warmup: time.Minute, Window: time.Minute, // overridden below
	}
	l := &stubLauncher{t: t}
	var progress strings.Builder
	results, err := RunOpenScenario(context.Background(), sc, l, ScenarioOptions{
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

	if _, err := RunOpenScenario(context.Background(), sc, nil, ScenarioOptions{}); !errors.Is(err, ErrNoLauncher) {
		t.Errorf("without a launcher = %v; want ErrNoLauncher", err)
	}
	boom := errors.New("no ports left")
	failing := LauncherFunc(func(context.Context, Arm) (Target, func(), error) { return Target{}, nil, boom })
	if _, err := RunOpenScenario(context.Background(), sc, failing, ScenarioOptions{}); !errors.Is(err, boom) ||
		!strings.Contains(err.Error(), "[1/2] tiny a 1000 rps: launch") {
		t.Errorf("with a failing launcher = %v; want its error with the run", err)
	}
}
