// Package levels keeps what priorities did to each priority level over the
// advice's window: requests served, their latency and queue wait, and
// those shed, for /advice's levels[] and the status page.
package levels

import (
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/loomgate/loomgate/advice"
	"github.com/loomgate/loomgate/advice/hist"
	"github.com/loomgate/loomgate/internal/outcome"
)

// Max is the most priority levels Window keeps apart; a record of a
// level beyond is not counted.
const Max = 4

// Window keeps the last advice.Window of each priority level's requests,
// in advice.BucketWidth buckets: what priorities did to each, for the
// status page and /advice ("critical: 200 rps, p99 62 ms; sheddable: shed 40%"). It
// is safe for concurrent use, and records without allocating.
type Window struct {
	names []string
	epoch time.Time

	mu    sync.Mutex
	first time.Time // the first record's, zero before it
	ring  [advice.WindowBuckets]levelBucket
}

// levelBucket is one bucket's counts, by level.
type levelBucket struct {
	number int64 // which bucket since the epoch it holds
	level  [Max]levelCounts
}

type levelCounts struct {
	answered, rejected uint32
	latency, queue     [hist.Buckets]uint32
}

// New returns a Window for the levels named, by index (a record's
// Level), at most Max.
func New(names []string) *Window {
	return &Window{names: names[:min(len(names), Max)], epoch: time.Now()}
}

// Record adds one finished request, at its End (now if zero), to its
// level. A request that never met admission is not counted.
func (l *Window) Record(o *outcome.Record) {
	if !o.Admission || int(o.Level) >= len(l.names) {
		return
	}
	now := o.End
	if now.IsZero() {
		now = time.Now()
	}
	n := int64(now.Sub(l.epoch) / advice.BucketWidth)
	qi, ti := hist.Index(o.Queue), hist.Index(o.Queue+o.Service)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.first.IsZero() {
		l.first = now
	}
	b := &l.ring[n%advice.WindowBuckets]
	if b.number != n {
		*b = levelBucket{number: n}
	}
	c := &b.level[o.Level]
	c.queue[qi]++
	switch {
	case o.Admitted && o.Answered():
		c.answered++
		c.latency[ti]++
	case o.Kind.Rejection():
		c.rejected++
	}
}

// Figures are one level's figures over the last advice.Window.
type Figures struct {
	Name string
	// Requests is how many met admission; Answered were served, Rejected
	// refused or shed with a 503.
	Requests, Answered, Rejected int
	// Throughput is Answered a second.
	Throughput float64
	// LatencyP99 is of the answered requests' queue wait and service
	// time together; QueueP99 of every request's queue wait. NaN when
	// none.
	LatencyP99, QueueP99 float64
	// RejectedShare is Rejected over Requests.
	RejectedShare float64
}

// Summary is the level's figures in a phrase: "critical: 196 rps, p99
// 52 ms", with ", 40% shed" when it lost any.
func (f Figures) Summary() string {
	s := fmt.Sprintf("%s: %.0f rps", f.Name, f.Throughput)
	if !math.IsNaN(f.LatencyP99) {
		s += fmt.Sprintf(", p99 %s", hist.Duration(f.LatencyP99).Round(time.Millisecond))
	}
	if f.Rejected > 0 {
		s += fmt.Sprintf(", %.0f%% shed", 100*f.RejectedShare)
	}
	return s
}

// Figures returns the figures at now of every level that had a request in
// the last advice.Window, highest level first.
func (l *Window) Figures(now time.Time) []Figures {
	cur := int64(now.Sub(l.epoch) / advice.BucketWidth)
	var sum [Max]levelCounts
	l.mu.Lock()
	first := l.first
	for i := range l.ring {
		b := &l.ring[i]
		if b.number <= cur-advice.WindowBuckets || b.number > cur {
			continue
		}
		for lv := range l.names {
			c, s := &b.level[lv], &sum[lv]
			s.answered += c.answered
			s.rejected += c.rejected
			for k := range hist.Buckets {
				s.latency[k] += c.latency[k]
				s.queue[k] += c.queue[k]
			}
		}
	}
	l.mu.Unlock()
	if first.IsZero() {
		return nil
	}
	// The span counted: the window, or less when traffic began later.
	start := l.epoch.Add(time.Duration(cur-advice.WindowBuckets+1) * advice.BucketWidth)
	if first.After(start) {
		start = first
	}
	span := max(now.Sub(start), time.Second).Seconds()
	var out []Figures
	for lv := len(l.names) - 1; lv >= 0; lv-- {
		s := &sum[lv]
		requests := 0
		for _, c := range s.queue {
			requests += int(c)
		}
		if requests == 0 {
			continue
		}
		out = append(out, Figures{
			Name: l.names[lv], Requests: requests, Answered: int(s.answered), Rejected: int(s.rejected),
			Throughput:    float64(s.answered) / span,
			LatencyP99:    hist.Quantile(0.99, hist.Bounds[:], s.latency[:]),
			QueueP99:      hist.Quantile(0.99, hist.Bounds[:], s.queue[:]),
			RejectedShare: float64(s.rejected) / float64(requests),
		})
	}
	return out
}
