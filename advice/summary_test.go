package advice

import (
	"strings"
	"testing"
	"time"

	"github.com/loomgate/loomgate/advice/predict"
	"github.com/loomgate/loomgate/limiter"
)

// TestNotEnoughTrafficCounts: the summary before there is enough traffic
// counts requests as people do, "1 request", "2 requests".
func TestNotEnoughTrafficCounts(t *testing.T) {
	for n, want := range map[int64]string{
		0: "Not enough traffic to advise yet: 0 requests finished in the last 3 s",
		1: "Not enough traffic to advise yet: 1 request finished in the last 3 s",
		2: "Not enough traffic to advise yet: 2 requests finished in the last 3 s",
	} {
		r := Advise(Settings{Mode: limiter.Fixed, Workers: 10}, Figures{Requests: n, Span: 3 * time.Second})
		if !strings.HasPrefix(r.Summary, want) {
			t.Errorf("%d requests: summary %q; want it to begin %q", n, r.Summary, want)
		}
	}
}

// TestWindowIsThePredictionsHorizon: the predictions of open demand tell
// of the minute the figures cover.
func TestWindowIsThePredictionsHorizon(t *testing.T) {
	if Window != predict.Horizon {
		t.Errorf("Window = %v, predict.Horizon = %v; want the same span", Window, predict.Horizon)
	}
}
