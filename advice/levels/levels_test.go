package levels

import (
	"math"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/loomgate/loomgate/internal/outcome"
)

// TestLevelsFigures: over 10 s, a critical level answered 100 requests at
// 50 ms with no wait, and a sheddable one answered 60 after a 2 s wait
// and had 40 shed: 10 rps at p99 50 ms, and 6 rps with 40% shed.
func TestLevelsFigures(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := New([]string{"sheddable", "default", "high", "critical"})
		start := time.Now()
		for i := range 100 {
			end := start.Add(time.Duration(i) * 100 * time.Millisecond)
			l.Record(&outcome.Record{Kind: outcome.OK, Level: 3, Admission: true, Admitted: true, UpstreamStatus: 200,
				Service: 50 * time.Millisecond, End: end})
			o := &outcome.Record{Kind: outcome.OK, Level: 0, Admission: true, Admitted: true, UpstreamStatus: 200,
				Queue: 2 * time.Second, Service: 50 * time.Millisecond, End: end}
			if i%5 >= 3 {
				o = &outcome.Record{Kind: outcome.RejectedQueueFull, Level: 0, Admission: true, Queue: time.Millisecond, End: end}
			}
			l.Record(o)
		}
		l.Record(&outcome.Record{Kind: outcome.BadRequest, Level: 2}) // never met admission
		got := l.Figures(start.Add(10 * time.Second))
		if len(got) != 2 || got[0].Name != "critical" || got[1].Name != "sheddable" {
			t.Fatalf("Figures = %+v; want critical, then sheddable", got)
		}
		near := func(x, want float64) bool { return math.Abs(x-want) <= 0.1*want }
		c, s := got[0], got[1]
		if c.Requests != 100 || c.Answered != 100 || c.Rejected != 0 || !near(c.Throughput, 10) || !near(c.LatencyP99, 0.05) {
			t.Errorf("critical %+v; want 100 answered, 10 rps, p99 50ms", c)
		}
		if s.Requests != 100 || s.Answered != 60 || s.Rejected != 40 || !near(s.Throughput, 6) || !near(s.LatencyP99, 2.05) || s.RejectedShare != 0.4 {
			t.Errorf("sheddable %+v; want 60 answered, 40 shed, 6 rps, p99 2.05s", s)
		}
		if sum := s.Summary(); !strings.HasPrefix(sum, "sheddable: 6 rps, p99 ") || !strings.HasSuffix(sum, ", 40% shed") {
			t.Errorf("Summary() = %q; want sheddable: 6 rps, p99 …, 40%% shed", sum)
		}
		// A minute later, nothing is left.
		if got := l.Figures(start.Add(80 * time.Second)); len(got) != 0 {
			t.Errorf("a minute later, Figures = %+v; want none", got)
		}
	})
}
