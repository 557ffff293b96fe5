package advice

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/loomgate/loomgate/advice/predict"
	"github.com/loomgate/loomgate/limiter"
)

// Open arrivals a fifth above what a pool of 20 at 100 ms serves (240 a
// second for 200), behind WORKERS=20 with a queue timeout of 30 s: the
// queue grows by 40 a second, and a request arriving t seconds in waits
// 40 t / 200 s, a fifth of t. No steady wait exists; the advice tells its
// course, and the course it tells is what the same setting does when
// played from an empty queue, at 20 s and at a minute, within 25%.
func TestOpenOverloadCourse(t *testing.T) {
	ms := time.Millisecond
	fixed := Settings{Mode: limiter.Fixed, Workers: 20, QueueSize: 10000, QueueTimeout: 30 * time.Second}
	routes := []synthRoute{{path: "/wait", lo: 98 * ms, hi: 102 * ms, pool: 0}}
	s := synth{routes: routes, pools: []int{20}, settings: fixed,
		phases: []synthPhase{{30 * time.Second, nil, []float64{240}}}}
	snap := s.play(t)
	if !snap.Figures.DemandOpen {
		t.Fatalf("demand read as closed: %s", snap.Figures.DemandWhy)
	}
	in := snap.Recommendation.Predictions[0]
	c := in.Course
	if c == nil {
		t.Fatalf("no course for an open overload:\n%s", snap.Text())
	}
	t.Logf("%s", snap.Text())
	// From first principles: 240 arrive, 200 are served.
	if math.Abs(c.Excess-0.2) > 0.05 || math.Abs(c.Growth-40) > 8 {
		t.Errorf("excess %.2f, growth %.1f/s; want 0.2 and 40", c.Excess, c.Growth)
	}
	if want := 150 * time.Second; math.Abs(float64(c.FullAfter-want)) > 0.2*float64(want) || math.Abs(c.Rejected-40.0/240) > 0.03 {
		t.Errorf("full after %s, then %.2f rejected; want about %s (30 s of waiting at 200/s, 40/s more), then 1/6", c.FullAfter, c.Rejected, want)
	}
	if !strings.Contains(snap.Text(), "Arrivals exceed what it serves by") {
		t.Errorf("the text tells no course:\n%s", snap.Text())
	}

	// The same setting, from an empty queue, for a minute and a bit: the
	// waits of the requests that arrived in the 5 s before each moment.
	var arrivals []struct{ at, latency time.Duration }
	played := synth{routes: routes, pools: []int{20}, settings: fixed,
		phases: []synthPhase{{100 * time.Second, nil, []float64{240}}},
		answered: func(at, latency time.Duration) {
			arrivals = append(arrivals, struct{ at, latency time.Duration }{at, latency})
		}}
	played.play(t)
	for _, pt := range c.Points {
		var got []time.Duration
		for _, a := range arrivals {
			if a.at > pt.At-predict.CourseWindow && a.at <= pt.At {
				got = append(got, a.latency)
			}
		}
		if len(got) == 0 {
			t.Fatalf("no answers to requests that arrived before %s", pt.At)
		}
		slices.Sort(got)
		p50 := got[len(got)/2]
		t.Logf("at %s: predicted latency %s, played %s (%d answers)", pt.At, pt.Latency, p50, len(got))
		if math.Abs(float64(p50-pt.Latency)) > 0.25*float64(p50) {
			t.Errorf("at %s: predicted latency %s; played from empty, %s", pt.At, pt.Latency, p50)
		}
	}
}
