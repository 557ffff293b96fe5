package advice

import "time"

// When a fit of memory against in-flight requests is worth reporting. A
// slope needs load that moved: readings taken at one steady level give a
// line through noise.
const (
	// minFitPoints is the fewest readings in the window for a fit.
	minFitPoints = 4
	// minFitSpread and minFitRelSpread: in-flight must have ranged over at
	// least this many requests, and this share of its mean, across them.
	minFitSpread    = 2
	minFitRelSpread = 0.25
	// minFitInFlight leaves out readings taken while next to nothing was
	// in flight: at rest a service's memory shows the load before (runtimes
	// keep their heap after a burst), not the load now.
	minFitInFlight = 0.5
)

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

// memoryReading adds one reading of the upstream's memory at now, paired
// with the in-flight requests averaged since the previous reading, and
// refits memory against in-flight over the window's readings. A fit that
// is usable (enough readings, enough spread, a positive slope) replaces the
// previous one; otherwise the previous one stands, so that a steady minute
// does not erase what a varied one measured.
func (w *window) memoryReading(now time.Time, bytes float64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.memory, w.memoryRead = bytes, true
	if w.sinceReadingCount > 0 {
		x := float64(w.sinceReadingSum) / float64(w.sinceReadingCount)
		w.sinceReadingSum, w.sinceReadingCount = 0, 0
		if x >= minFitInFlight {
			if len(w.points) == cap(w.points) {
				w.points = append(w.points[:0], w.points[1:]...)
			}
			w.points = append(w.points, memoryPoint{at: now, inFlight: x, bytes: bytes})
		}
	}
	// Readings older than the window go: memory follows load, and an old
	// level of both says nothing of the service as it runs now.
	keep := 0
	for keep < len(w.points) && now.Sub(w.points[keep].at) > Window {
		keep++
	}
	if keep > 0 {
		w.points = append(w.points[:0], w.points[keep:]...)
	}
	if len(w.points) < minFitPoints {
		return
	}
	var xs, ys [maxMemoryPoints]float64
	lo, hi, sum := w.points[0].inFlight, w.points[0].inFlight, 0.0
	for i, p := range w.points {
		xs[i], ys[i] = p.inFlight, p.bytes
		lo, hi, sum = min(lo, p.inFlight), max(hi, p.inFlight), sum+p.inFlight
	}
	mean := sum / float64(len(w.points))
	if hi-lo < minFitSpread || hi-lo < minFitRelSpread*mean {
		return
	}
	_, b, ok := leastSquares(xs[:len(w.points)], ys[:len(w.points)])
	if !ok || b <= 0 {
		return
	}
	w.bytesPerRequest = b
}
