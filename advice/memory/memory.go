// Package memory follows the upstream's own memory against the requests it
// holds: readings of its metrics page (the series a selector picks from a
// Prometheus exposition, summed), each paired with the requests in flight
// on average since the reading before, and a least-squares fit of the two
// over a span, whose slope is what one more request in flight costs it.
package memory

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/loomgate/loomgate/series"
)

// When a fit of memory against in-flight requests is worth reporting. A
// slope needs load that moved: readings taken at one steady level give a
// line through noise.
const (
	// minFitPoints is the fewest readings in the span for a fit.
	minFitPoints = 4
	// minFitSpread and minFitRelSpread: in-flight must have ranged over at
	// least this many requests, and this share of its mean, across them.
	minFitSpread    = 2
	minFitRelSpread = 0.25
	// minFitInFlight leaves out readings taken while next to nothing was
	// in flight: at rest a service's memory shows the load before (runtimes
	// keep their heap after a burst), not the load now.
	minFitInFlight = 0.5
	// maxPoints bounds the readings kept for the fit: one per scrape in
	// the span, at the shortest interval worth using.
	maxPoints = 256
)

// point is one reading of the upstream's memory, with the in-flight
// requests averaged since the previous reading.
type point struct {
	at       time.Time
	inFlight float64
	bytes    float64
}

// Fit follows the upstream's memory against the requests in flight. It is
// safe for concurrent use.
type Fit struct {
	span time.Duration

	mu sync.Mutex
	// In-flight samples since the previous reading.
	sum, count int64
	points     []point
	last       float64 // the last reading
	// perRequest is the slope of the last usable fit, 0 before one.
	perRequest float64
}

// NewFit returns a Fit over the readings of the last span.
func NewFit(span time.Duration) *Fit {
	return &Fit{span: span, points: make([]point, 0, maxPoints)}
}

// Sample adds one sample of the requests in flight, to be paired with the
// next reading.
func (f *Fit) Sample(inFlight int64) {
	f.mu.Lock()
	f.sum += inFlight
	f.count++
	f.mu.Unlock()
}

// Reading adds one reading of the upstream's memory at now, paired with
// the in-flight requests averaged since the previous reading, and refits
// memory against in-flight over the span's readings. A fit that is usable
// (enough readings, enough spread, a positive slope) replaces the previous
// one; otherwise the previous one stands, so that a steady minute does not
// erase what a varied one measured.
func (f *Fit) Reading(now time.Time, bytes float64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.last = bytes
	if f.count > 0 {
		x := float64(f.sum) / float64(f.count)
		f.sum, f.count = 0, 0
		if x >= minFitInFlight {
			if len(f.points) == cap(f.points) {
				f.points = append(f.points[:0], f.points[1:]...)
			}
			f.points = append(f.points, point{at: now, inFlight: x, bytes: bytes})
		}
	}
	// Readings older than the span go: memory follows load, and an old
	// level of both says nothing of the service as it runs now.
	keep := 0
	for keep < len(f.points) && now.Sub(f.points[keep].at) > f.span {
		keep++
	}
	if keep > 0 {
		f.points = append(f.points[:0], f.points[keep:]...)
	}
	if len(f.points) < minFitPoints {
		return
	}
	var xs, ys [maxPoints]float64
	lo, hi, sum := f.points[0].inFlight, f.points[0].inFlight, 0.0
	for i, p := range f.points {
		xs[i], ys[i] = p.inFlight, p.bytes
		lo, hi, sum = min(lo, p.inFlight), max(hi, p.inFlight), sum+p.inFlight
	}
	mean := sum / float64(len(f.points))
	if hi-lo < minFitSpread || hi-lo < minFitRelSpread*mean {
		return
	}
	_, b, ok := leastSquares(xs[:len(f.points)], ys[:len(f.points)])
	if !ok || b <= 0 {
		return
	}
	f.perRequest = b
}

// Figures are the last reading, 0 before one, and the bytes a request in
// flight costs the upstream by the last usable fit, 0 before one.
func (f *Fit) Figures() (bytes, perRequest float64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.last, f.perRequest
}

// leastSquares fits y = a + b·x to the points by ordinary least squares.
// ok is false with fewer than two points or when x does not vary.
func leastSquares(xs, ys []float64) (a, b float64, ok bool) {
	n := float64(len(xs))
	if len(xs) < 2 || len(xs) != len(ys) {
		return 0, 0, false
	}
	var sx, sy float64
	for i := range xs {
		sx += xs[i]
		sy += ys[i]
	}
	mx, my := sx/n, sy/n
	// Centred sums: the raw sum-of-squares formula loses every digit when
	// x is large and varies little.
	var sxx, sxy float64
	for i := range xs {
		dx := xs[i] - mx
		sxx += dx * dx
		sxy += dx * (ys[i] - my)
	}
	if sxx == 0 {
		return 0, 0, false
	}
	b = sxy / sxx
	return my - b*mx, b, true
}

// MaxScrapeBytes bounds what is read of the upstream's metrics page: a
// large JVM exposes some hundreds of KiB.
const MaxScrapeBytes = 16 << 20

// ErrNoSeries: the page was read but nothing matched the selector.
var ErrNoSeries = errors.New("no series matches")

// Scrape reads the metrics page at url once, with client, and sums the
// series sel picks. ctx bounds it.
func Scrape(ctx context.Context, client *http.Client, url string, sel series.Selector) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	// The classic text format: every client library serves it, and it is
	// the one expfmt parses without negotiation.
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("status %s", resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(io.LimitReader(resp.Body, MaxScrapeBytes))
	if err != nil {
		return 0, err
	}
	v, n := sel.Sum(families)
	if n == 0 {
		return 0, fmt.Errorf("%w %s", ErrNoSeries, sel)
	}
	return v, nil
}
