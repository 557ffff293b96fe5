package advice

import (
	"math"
	"testing"
	"time"

	"github.com/loomgate/loomgate/route"
)

// A dependency that slows down under the same clients, 50 ms to 150 ms:
// not saturation, and what the settings would do is what they do now.
// The minute's answers are mostly the quick ones from before (400 a second
// against 133), so predicting from all of them would promise three times
// the throughput at a third of the latency.
func TestPredictionOfASlowerDependencyIsOfNow(t *testing.T) {
	ms := time.Millisecond
	r, _ := route.Parse("")
	w := newWindow(t0)
	end := feed(w, r,
		stage{0, 30, []flow{{"/wait", 400, 49 * ms, 51 * ms}}},
		stage{30, 50, []flow{{"/wait", 133, 149 * ms, 151 * ms}}},
	)
	f := w.figures(end, r.Names())
	if f.Estimate.Saturated || len(f.Routes) != 1 {
		t.Fatalf("saturated %v, routes %+v; want one route, not saturated", f.Estimate.Saturated, f.Routes)
	}
	rec := Advise(Settings{}, f)
	if len(rec.Predictions) == 0 {
		t.Fatalf("no predictions: %s", rec.Summary)
	}
	p := rec.Predictions[0]
	if p.Name != "in force" {
		t.Fatalf("first prediction %q; want the setting in force", p.Name)
	}
	if math.Abs(p.Throughput-133) > 0.15*133 {
		t.Errorf("predicted throughput %.0f; want 133 within 15%%, the clients at 150 ms", p.Throughput)
	}
	if p.P50 < 130*ms || p.P50 > 170*ms {
		t.Errorf("predicted p50 %v; want about 150 ms", p.P50)
	}
}
