package metrics

import (
	"sync"
	"time"
)

// PeakWindow is the span the high-water gauges cover: loomgate_in_flight_max
// and its siblings are the highest value within the last PeakWindow. A
// fixed span, not "since the previous scrape", so that every scraper (an HA
// pair of Prometheus servers, someone running curl) sees every peak; a
// minute is the longest scrape interval in common use.
const PeakWindow = time.Minute

const (
	peakSlotWidth = 5 * time.Second
	peakSlots     = int64(PeakWindow / peakSlotWidth)
)

// peakSlot holds the highest values seen in one peakSlotWidth.
type peakSlot struct {
	n                       int64 // slot number since the epoch; -1 for never used
	inFlight, queued, bytes int64
}

// peaks keeps the high-water marks of the last PeakWindow in slots. It alone
// calls Config.TakePeaks, and folds what each call returns into the slot of
// the moment, under its lock: whoever triggers a take, every reader sees its
// result. Run's sampler takes every SampleInterval, so that a peak lands in
// the slot of when it happened; a scrape takes too, so that it misses
// nothing since the sampler's last turn.
type peaks struct {
	take  func() (inFlight, queued, bytes int64)
	mu    sync.Mutex
	epoch time.Time
	slots [peakSlots]peakSlot
}

func newPeaks(epoch time.Time, take func() (int64, int64, int64)) *peaks {
	p := &peaks{epoch: epoch, take: take}
	for i := range p.slots {
		p.slots[i].n = -1
	}
	return p
}

func (p *peaks) slotNumber(t time.Time) int64 {
	return max(int64(t.Sub(p.epoch)/peakSlotWidth), 0)
}

// fold takes the peaks of the period ending at now into its slot.
func (p *peaks) fold(now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.foldLocked(now)
}

func (p *peaks) foldLocked(now time.Time) {
	inFlight, queued, bytes := p.take()
	n := p.slotNumber(now)
	s := &p.slots[n%peakSlots]
	if s.n > n {
		return
	}
	if s.n != n {
		*s = peakSlot{n: n}
	}
	s.inFlight = max(s.inFlight, inFlight)
	s.queued = max(s.queued, queued)
	s.bytes = max(s.bytes, bytes)
}

// max folds the peaks up to now in and returns the highest values of the
// slots within PeakWindow of now.
func (p *peaks) max(now time.Time) (inFlight, queued, bytes int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.foldLocked(now)
	cur := p.slotNumber(now)
	for i := range p.slots {
		s := &p.slots[i]
		if s.n < 0 || s.n <= cur-peakSlots || s.n > cur {
			continue
		}
		inFlight = max(inFlight, s.inFlight)
		queued = max(queued, s.queued)
		bytes = max(bytes, s.bytes)
	}
	return inFlight, queued, bytes
}
