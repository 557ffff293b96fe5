package limiter

import (
	"math/rand/v2"
	"sync"
	"time"
)

// heldShards is how many shards the in-flight integral is split into: a
// request's admission and release take one shard's lock each, picked at
// random, so that on a few cores they seldom meet.
const heldShards = 16

// integral is the time-integral of a count that changes concurrently, in
// request-nanoseconds: the in-flight requests' (RequestSeconds). It is kept
// as n·now − Σ t over the changes (+1 at t adds t, −1 at t subtracts it),
// which is Σ (end − start) over the requests that ended plus Σ (now − start)
// over those still counted: a change records its time and its sign, and
// nothing needs carrying forward from the previous change as a running
// integral would, so changes need no common lock. The sum is split into
// shards, and a change to one shard need not be matched in the same one:
// the terms add up whichever shard holds them.
//
// A reader takes every shard's lock before it reads the clock and folds
// them in, so that a reading is of one instant: the changes made before it
// and none after. Folding the shards one at a time would not do: a request
// that begins in a shard already folded and ends in one not yet folded is
// counted by its end alone, off by the time from the reading's instant to
// that end, and the other way round by its start; the errors have random
// signs, but a reader descheduled mid-fold lets thousands of requests pass,
// and such readings were seen many request-seconds ahead, which the
// total's never decreasing then kept. The reader holds the locks for a few hundred
// nanoseconds, at scrape intervals; a change waits for it at most that long.
// A change whose clock was read before the instant but which lands after it
// is missed by that reading only, by at most that delay, and the total it
// returns never decreases, because Prometheus reads a counter that decreases
// as a restart.
type integral struct {
	base   time.Time // changes are timed in nanoseconds since base
	shards [heldShards]shard

	readMu sync.Mutex
	// secs and nanos are what readings have folded in, as whole
	// request-seconds plus nanoseconds under one second, so that neither
	// overflows nor loses precision however long the process lives.
	secs, nanos int64
	last        float64 // the last total returned
}

type shard struct {
	mu sync.Mutex
	// n is the count's part held here (it may be negative: a request can
	// end in another shard than it began), sum Σ t of its changes since the
	// last fold. Both wrap around harmlessly: n·now − sum is exact as long
	// as the true integral since the fold is below 2^63 ns (292
	// request-years); add folds a shard long before.
	n, sum int64
	// Padding to its own cache lines: shards side by side would otherwise
	// share a line, and the cores would fight over it as over one lock.
	_ [128 - 24]byte
}

// foldAbove is the unfolded integral (ns) past which a change folds its
// shard itself, far below the 2^63 ns at which n·now − sum wraps.
const foldAbove = 1 << 62

func newIntegral(now time.Time) *integral { return &integral{base: now} }

// add changes the count by d (+1 or −1) at now.
func (in *integral) add(now time.Time, d int64) {
	t := int64(now.Sub(in.base))
	s := &in.shards[rand.Uint32()%heldShards]
	s.mu.Lock()
	s.n += d
	s.sum += d * t
	v := s.n*t - s.sum
	s.mu.Unlock()
	if v > foldAbove || v < -foldAbove {
		// Only after 146 request-years unread in one shard: no reader
		// scrapes the metrics. The change's own time stands for the clock.
		in.seconds(func() time.Time { return now })
	}
}

// seconds folds every shard in at the instant clock gives, read while all
// of them are held, and returns the integral since base in request-seconds.
func (in *integral) seconds(clock func() time.Time) float64 {
	in.readMu.Lock()
	defer in.readMu.Unlock()
	for i := range in.shards {
		in.shards[i].mu.Lock()
	}
	t := int64(clock().Sub(in.base))
	for i := range in.shards {
		s := &in.shards[i]
		v := s.n*t - s.sum
		s.sum = s.n * t
		s.mu.Unlock()
		in.secs, in.nanos = addNanos(in.secs, in.nanos, v)
	}
	total := seconds(in.secs, in.nanos)
	if total < in.last {
		total = in.last
	}
	in.last = total
	return total
}

// addNanos adds v nanoseconds (of either sign) to secs and nanos, keeping
// nanos within [0, 1s).
func addNanos(secs, nanos, v int64) (int64, int64) {
	const second = int64(time.Second)
	secs += v / second
	nanos += v % second
	switch {
	case nanos >= second:
		secs, nanos = secs+1, nanos-second
	case nanos < 0:
		secs, nanos = secs-1, nanos+second
	}
	return secs, nanos
}
