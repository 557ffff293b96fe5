package advice

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/loomgate/loomgate/route"

	"github.com/loomgate/loomgate/internal/outcome"
	"github.com/loomgate/loomgate/limiter"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC)

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

// flow is one route's steady traffic in a phase: perSecond answers a
// second, their service times spread evenly from lo to hi.
type flow struct {
	path      string
	perSecond int
	lo, hi    time.Duration
}

// stage is a synthetic load: from..to seconds after t0, the flows, and
// what the sampler sees in flight: Little's law over the flows, as a real
// upstream would hold them.
type stage struct {
	from, to int
	flows    []flow
}

func (s stage) inFlight() int64 {
	l := 0.0
	for _, f := range s.flows {
		l += float64(f.perSecond) * (f.lo + f.hi).Seconds() / 2
	}
	return int64(math.Round(l))
}

// feed plays stages into w. Requests finish spread over each second and
// samples fall in the middle of each quarter, so that no event sits on a
// bucket's edge.
func feed(w *window, r *route.Classes, stages ...stage) time.Time {
	var end time.Time
	for _, st := range stages {
		for sec := st.from; sec < st.to; sec++ {
			for q := range 4 {
				w.sample(t0.Add(time.Duration(sec)*time.Second+time.Duration(q)*250*time.Millisecond+125*time.Millisecond), st.inFlight(), 0)
			}
			for _, f := range st.flows {
				for i := range f.perSecond {
					at := t0.Add(time.Duration(sec)*time.Second + time.Duration(i)*time.Second/time.Duration(f.perSecond+1))
					d := f.lo + time.Duration(float64(f.hi-f.lo)*(float64(i)+0.5)/float64(f.perSecond))
					target := []byte(f.path)
					w.record(at, r.Class([]byte("GET"), target), &outcome.Record{Method: []byte("GET"), Target: target,
						Admission: true, Admitted: true, UpstreamStatus: 200, Service: d})
				}
			}
		}
		end = t0.Add(time.Duration(st.to) * time.Second)
	}
	return end
}

func TestEstimateOnRealTraffic(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name          string
		stages        []stage
		saturated     bool
		routeLocal    string  // the route that alone queues inside
		capacity      float64 // NaN: unknown
		lowerBoundMin float64
		// unknown: whether it is saturated cannot be told, for want of a
		// calmer load to compare with; then no lower bound is known either.
		unknown bool
		// atMost: the capacity is unknown, but no more than this.
		atMost float64
	}{
		{
			// 40 clients on a normal endpoint, median several times its
			// minimum, an idle upstream: nothing queues. The old estimate
			// said saturated with capacity 6. At one load it cannot be
			// told from a pool that stretched every request as much.
			name:      "service times spread 20-400 ms, 40 clients",
			stages:    []stage{{0, 120, []flow{{"/wait", 190, 20 * ms, 400 * ms}}}},
			saturated: false, capacity: math.NaN(), unknown: true,
		},
		{
			// A cheap and an expensive request on one route class, an
			// idle upstream. The old estimate said capacity 1.
			name: "500 rps at 2 ms beside 20 clients at 200 ms",
			stages: []stage{{0, 120, []flow{
				{"/wait?ms=2", 500, 2 * ms, 2 * ms}, {"/wait?ms=200", 100, 199 * ms, 201 * ms},
			}}},
			saturated: false, capacity: math.NaN(), unknown: true,
		},
		{
			// A hidden pool of 50: 10 clients, then 200 within the window.
			// The old estimate, on the window's average throughput, said 40.
			name: "pool of 50: 10 clients, then 200",
			stages: []stage{
				{0, 20, []flow{{"/wait", 50, 190 * ms, 210 * ms}}},
				{20, 80, []flow{{"/wait", 250, 780 * ms, 820 * ms}}},
			},
			saturated: true, capacity: 50, lowerBoundMin: 9,
		},
		{
			// The same pool behind service times spread 20-400 ms.
			name: "pool of 50 behind spread service times",
			stages: []stage{
				{0, 30, []flow{{"/wait", 48, 20 * ms, 400 * ms}}},
				{30, 90, []flow{{"/wait", 238, 650 * ms, 1030 * ms}}},
			},
			saturated: true, capacity: 50, lowerBoundMin: 9,
		},
		{
			// A pool of 10 behind /db only; /wait stays healthy. A global
			// cap would throttle /wait.
			name: "pool behind one route",
			stages: []stage{
				{0, 30, []flow{{"/db", 25, 199 * ms, 201 * ms}, {"/wait", 100, 99 * ms, 101 * ms}}},
				{30, 90, []flow{{"/db", 50, 990 * ms, 1010 * ms}, {"/wait", 100, 99 * ms, 101 * ms}}},
			},
			saturated: false, routeLocal: "GET /db", capacity: math.NaN(), lowerBoundMin: 14,
		},
		{
			// Two cores: 1 ms each at 2 clients, 16 ms each at 32. The
			// 2 clients already served what 32 did: they may have been
			// past the knee, and the capacity is at most 2.
			name: "CPU-bound",
			stages: []stage{
				{0, 30, []flow{{"/cpu", 2000, 900 * time.Microsecond, 1100 * time.Microsecond}}},
				{30, 90, []flow{{"/cpu", 2000, 15 * ms, 17 * ms}}},
			},
			saturated: true, capacity: math.NaN(), atMost: 2,
		},
		{
			// The same cores, from 1 client: it served half what 32 did.
			name: "CPU-bound, from one client",
			stages: []stage{
				{0, 30, []flow{{"/cpu", 1000, 900 * time.Microsecond, 1100 * time.Microsecond}}},
				{30, 90, []flow{{"/cpu", 2000, 15 * ms, 17 * ms}}},
			},
			saturated: true, capacity: 2, lowerBoundMin: 0.9,
		},
		{
			// A dependency slows down, the load does not change: service
			// time grows fourfold with no more in flight. Not the load's
			// doing; capping would cut throughput fourfold.
			name: "slower dependency, same load",
			stages: []stage{
				{0, 60, []flow{{"/wait", 400, 99 * ms, 101 * ms}}},
				{60, 120, []flow{{"/wait", 100, 399 * ms, 401 * ms}}},
			},
			saturated: false, capacity: math.NaN(), unknown: true,
		},
		{
			// A dependency slows threefold as the load doubles: more in
			// flight, served less. Slower, not saturated: a queue inside
			// serves as much as ever.
			name: "slower dependency as the load rises",
			stages: []stage{
				{0, 60, []flow{{"/wait", 400, 49 * ms, 51 * ms}}},
				{60, 120, []flow{{"/wait", 267, 149 * ms, 151 * ms}}},
			},
			saturated: false, capacity: math.NaN(),
		},
		{
			// The expensive share grows within one class: the mean rises,
			// the first quartile (the cheap requests) does not.
			name: "expensive share grows within one route",
			stages: []stage{
				{0, 40, []flow{{"/wait?ms=2", 500, 2 * ms, 2 * ms}, {"/wait?ms=200", 25, 199 * ms, 201 * ms}}},
				{40, 100, []flow{{"/wait?ms=2", 500, 2 * ms, 2 * ms}, {"/wait?ms=200", 100, 199 * ms, 201 * ms}}},
			},
			saturated: false, capacity: math.NaN(), lowerBoundMin: 20,
		},
		{
			// Demand that changes from one minute to the next: saturated a
			// while ago, calm now. The capacity seen then still holds.
			name: "saturated, then calm",
			stages: []stage{
				{0, 60, []flow{{"/wait", 50, 199 * ms, 201 * ms}}},
				{60, 120, []flow{{"/wait", 250, 790 * ms, 810 * ms}}},
				{120, 200, []flow{{"/wait", 100, 199 * ms, 201 * ms}}},
			},
			saturated: false, capacity: 50, lowerBoundMin: 19,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, _ := route.Parse("")
			w := newWindow(t0)
			end := feed(w, r, tt.stages...)
			f := w.figures(end, r.Names())
			e := f.Estimate
			if e.Saturated != tt.saturated {
				t.Errorf("Saturated = %v; want %v (estimate %+v, routes %+v)", e.Saturated, tt.saturated, e, f.Routes)
			}
			if got := e.SaturationUnknown != ""; got != tt.unknown {
				t.Errorf("SaturationUnknown = %q; want unknown %v", e.SaturationUnknown, tt.unknown)
			}
			if tt.unknown && e.LowerBound != 0 {
				t.Errorf("LowerBound = %.1f; want none, with no unloaded speed seen", e.LowerBound)
			}
			if tt.atMost > 0 && math.Abs(e.CapacityAtMost-tt.atMost) > 0.15*tt.atMost {
				t.Errorf("CapacityAtMost = %.1f; want %v within 15%%", e.CapacityAtMost, tt.atMost)
			}
			if got := strings.Join(e.RouteLocal, ","); got != tt.routeLocal {
				t.Errorf("RouteLocal = %q; want %q", got, tt.routeLocal)
			}
			switch {
			case math.IsNaN(tt.capacity):
				if !math.IsNaN(e.Capacity) || e.Unknown == "" {
					t.Errorf("Capacity = %v (%q); want unknown, with why", e.Capacity, e.Unknown)
				}
			case math.Abs(e.Capacity-tt.capacity) > 0.15*tt.capacity:
				t.Errorf("Capacity = %.1f (%.1f to %.1f); want %v within 15%%", e.Capacity, e.CapacityLow, e.CapacityHigh, tt.capacity)
			}
			if e.LowerBound < tt.lowerBoundMin {
				t.Errorf("LowerBound = %.1f; want at least %v, what it served unstretched", e.LowerBound, tt.lowerBoundMin)
			}
			// No recommendation caps below what a healthy upstream serves.
			rec := Advise(Settings{}, f)
			if !tt.saturated && (rec.Workers != 0 || rec.Bulkhead != 0) {
				t.Errorf("Advise = %+v; want no cap for an upstream that is not saturated", rec)
			}
			if limit := max(rec.Workers, rec.Bulkhead); limit > 0 && float64(limit) < e.LowerBound {
				t.Errorf("Advise caps at %d; below the %.0f served unstretched", limit, e.LowerBound)
			}
		})
	}
}

func TestEstimateNeedsVariation(t *testing.T) {
	r, _ := route.Parse("")
	w := newWindow(t0)
	end := feed(w, r, stage{0, 90, []flow{{"/wait", 250, 790 * time.Millisecond, 810 * time.Millisecond}}})
	e := w.figures(end, r.Names()).Estimate
	if e.LoadVaried || e.Saturated || e.SaturationUnknown == "" || !math.IsNaN(e.Capacity) || e.LowerBound != 0 {
		t.Errorf("steady load: %+v; want saturation and capacity unknown, no lower bound, for want of variation", e)
	}
}

// TestEstimateCPUBound: an upstream whose bottleneck runs the newest
// first, as a CPU scheduler does with a task just woken. At 1 request in
// flight every answer takes about 0.9 ms; at 27 a third still do (they ran
// as soon as they arrived) while the rest wait 5 to 40 ms. The first
// quartile never moves; the median grows tenfold, and that is saturation,
// at what 1800 answers a second at 0.9 ms unloaded make: 1.6 at once.
func TestEstimateCPUBound(t *testing.T) {
	r, _ := route.Parse("")
	w := newWindow(t0)
	end := feed(w, r,
		stage{0, 30, []flow{{"/cpu", 1000, 800 * time.Microsecond, time.Millisecond}}},
		stage{30, 90, []flow{{"/cpu", 600, 800 * time.Microsecond, 900 * time.Microsecond}, {"/cpu", 1200, 5 * time.Millisecond, 40 * time.Millisecond}}})
	e := w.figures(end, r.Names()).Estimate
	if !e.Saturated || e.Capacity < 1 || e.Capacity > 4 {
		t.Errorf("CPU-bound at 27 in flight: saturated %v, capacity %.2f (%s); want saturated, 1 to 4", e.Saturated, e.Capacity, e.Unknown)
	}
}

// TestClientsThatLeftWhileQueuedAreNoRejections: of requests that met
// admission and were not admitted, only those refused count as rejected;
// clients that left while queued (a load cut at its end, a user who gave
// up) are arrivals.
func TestClientsThatLeftWhileQueuedAreNoRejections(t *testing.T) {
	a, err := New(Config{State: func() State { return State{} }})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		a.Record(&outcome.Record{Kind: outcome.RejectedQueueFull, Admission: true, Status: 503, End: time.Now()})
	}
	for range 5 {
		a.Record(&outcome.Record{Kind: outcome.ClientClosed, Admission: true, Queue: time.Second, End: time.Now()})
	}
	if f := a.Snapshot().Figures; f.Rejected != 3 {
		t.Errorf("rejected %d; want 3: the 5 clients that left while queued were not refused", f.Rejected)
	}
}

func TestRecordDoesNotAllocate(t *testing.T) {
	a, err := New(Config{State: func() State { return State{} }})
	if err != nil {
		t.Fatal(err)
	}
	s := &outcome.Record{Method: []byte("GET"), Target: []byte("/users/7?x=1"), Admission: true, Admitted: true, UpstreamStatus: 200, Service: 40 * time.Millisecond}
	a.Record(s) // the window's first bucket is made once
	if n := testing.AllocsPerRun(1000, func() { a.Record(s) }); n != 0 {
		t.Errorf("Record allocates %v times per call; want 0", n)
	}
}

func BenchmarkRecord(b *testing.B) {
	a, _ := New(Config{State: func() State { return State{} }})
	s := outcome.Record{Method: []byte("GET"), Target: []byte("/users/7?x=1"), Admission: true, Admitted: true, UpstreamStatus: 200, Queue: time.Millisecond, Service: 40 * time.Millisecond}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		s := s
		for pb.Next() {
			a.Record(&s)
		}
	})
}

func BenchmarkSnapshot(b *testing.B) {
	r, _ := route.Parse("")
	w := newWindow(t0)
	end := feed(w, r, stage{0, 20, []flow{{"/wait", 50, 190 * time.Millisecond, 210 * time.Millisecond}}},
		stage{20, 80, []flow{{"/wait", 250, 780 * time.Millisecond, 820 * time.Millisecond}}})
	b.ReportAllocs()
	for b.Loop() {
		f := w.figures(end, r.Names())
		Advise(Settings{Mode: limiter.Fixed, Workers: 200, QueueSize: 10000, QueueTimeout: 30 * time.Second}, f)
	}
}

// TestEstimateOfOneAtOnce: a critical section every request takes, 20 ms:
// 1 client, then 20. The one client already served all there is, so
// its load may have been past the knee, and the capacity is at most 1:
// which is 1, as no limit goes lower.
func TestEstimateOfOneAtOnce(t *testing.T) {
	r, _ := route.Parse("")
	w := newWindow(t0)
	end := feed(w, r,
		stage{0, 30, []flow{{"/pinned", 50, 19 * time.Millisecond, 21 * time.Millisecond}}},
		stage{30, 90, []flow{{"/pinned", 50, 390 * time.Millisecond, 410 * time.Millisecond}}})
	e := w.figures(end, r.Names()).Estimate
	if !e.Saturated || math.IsNaN(e.Capacity) || e.Capacity < 0.85 || e.Capacity > 1.15 {
		t.Errorf("saturated %v, capacity %.2f (%s); want saturated at 1", e.Saturated, e.Capacity, e.Unknown)
	}
}

// TestMedian: one median for service times and for loads, the middle of
// an odd count, the mean of the two middle ones of an even count, and 0
// for none; the input is left as it was.
func TestMedian(t *testing.T) {
	ds := []time.Duration{30 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond}
	if got := median(ds); got != 20*time.Millisecond {
		t.Errorf("median(%v) = %v; want 20ms", ds, got)
	}
	if ds[0] != 30*time.Millisecond {
		t.Errorf("median sorted its input: %v", ds)
	}
	for _, tt := range []struct {
		xs   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{4}, 4},
		{[]float64{4, 1, 3, 2}, 2.5},
		{[]float64{0.5, 9, 1}, 1},
	} {
		if got := median(tt.xs); got != tt.want {
			t.Errorf("median(%v) = %v; want %v", tt.xs, got, tt.want)
		}
	}
}
