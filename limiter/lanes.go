package limiter

import (
	"errors"
	"fmt"
	"time"
)

// Level is a request's priority: a freed permit goes to the highest level
// waiting, and a full queue sheds the lowest first.
type Level uint8

// The levels, lowest first.
const (
	Sheddable Level = iota
	Default
	High
	Critical
	// NumLevels counts the levels, for arrays indexed by Level.
	NumLevels
)

var levelNames = [NumLevels]string{"sheddable", "default", "high", "critical"}

// String returns the level's name as the configuration writes it.
func (l Level) String() string {
	if l < NumLevels {
		return levelNames[l]
	}
	return fmt.Sprintf("Level(%d)", l)
}

// UnmarshalText reads a level as String writes it.
func (l *Level) UnmarshalText(text []byte) error {
	for i, n := range levelNames {
		if string(text) == n {
			*l = Level(i)
			return nil
		}
	}
	return errors.New("want critical, high, default or sheddable")
}

// Levels lists every level, highest first, for metrics that create their
// series at once.
func Levels() []Level { return []Level{Critical, High, Default, Sheddable} }

// flowQueues is how many queues a level shares out among its flows; a
// flow's hand is two of them (shuffle sharding, as
// Kubernetes API Priority and Fairness has it): a flow's requests join
// the queue of its hand it already waits in, else an empty one, else the
// shorter. So each flow with waiters has a queue of its own, and its
// share of the turns, unless both queues of its hand are taken by others: with
// k other flows waiting, about (k/64)^2 of the time, 0.4% for k = 4. 64
// queues keep the state a few kilobytes whatever the flows.
const flowQueues = 64

// lanes order a Limiter's waiters by level and, within a level, fairly
// between flows: a freed permit goes to a level below its guaranteed
// share first, then to the highest level waiting, as far as the shares of
// the other active levels leave it free (see mayTake); within the level,
// to the queue with waiters that has been served least, FIFO within a
// queue.
//
// Served is counted in the upstream's time, not in requests (start-time
// fair queuing, as Kubernetes API Priority and Fairness counts in
// seat-seconds): a permit held ten times as long costs its flow ten
// times as much, so that a flow of slow requests and one of fast ones
// beside it each get half of the permits' time, not half of the
// admissions and so ten elevenths of the time. A turn is charged, as it
// is taken, what the queue's recent requests were served for, and settled
// at Leave against what this one was. A queue that starts waiting starts
// at the level's clock, banking nothing from while it was idle. Where
// nothing is known yet, or every request costs alike, the queues take
// turns, a request each.
//
// Every waiter also stands in the Limiter's one list by arrival, whose
// head has the earliest deadline: the lanes choose who is admitted, the
// list who times out. The caller holds the Limiter's mutex.
type lanes struct {
	level [NumLevels]levelLanes
	// share is the permits guaranteed to each level, 0 for none; held the
	// permits each level holds now.
	share [NumLevels]int
	held  [NumLevels]int
	// released is when each level last gave back a permit.
	released [NumLevels]time.Time
}

// levelLanes are one level's queues.
type levelLanes struct {
	queue   [flowQueues]laneQueue
	turns   []uint8 // the queues with waiters, in the order they take turns
	turn    int     // where the next search for the least served starts, an index of turns
	waiting int
	// clock is the served count of the queue whose turn was taken last:
	// where a queue that starts waiting starts. cost is a moving mean of
	// what the level's requests were served for, the charge of a queue
	// that has none of its own yet.
	clock, cost time.Duration
}

// laneQueue is one queue of a level, FIFO by the waiters' lane links.
type laneQueue struct {
	head, tail *waiter
	n          int
	// owner is the flow whose request found it empty: while it has
	// waiters, that flow's requests join it.
	owner uint64
	// served is the upstream's time charged to the queue, on its level's
	// clock; cost a moving mean of what its requests were served for.
	served, cost time.Duration
}

// costMemory is how many requests the moving means of cost remember,
// about: a flow's cost follows its requests within a few, and one slow
// outlier moves it by a quarter of the difference.
const costMemory = 4

// push adds w, of level and flow (0 for none: every request of the level
// in one queue), to its lanes.
func (ls *lanes) push(w *waiter, level Level, flow uint64) {
	lv := &ls.level[level]
	q := uint8(0)
	if flow != 0 {
		// Of the flow's hand: the queue it already waits in, so that it
		// takes one turn a round however many it sends; else an empty
		// one, of its own; else the shorter, shared.
		a, b := uint8(flow%flowQueues), uint8((flow/flowQueues)%flowQueues)
		qa, qb := &lv.queue[a], &lv.queue[b]
		switch {
		case qa.n > 0 && qa.owner == flow:
			q = a
		case qb.n > 0 && qb.owner == flow:
			q = b
		case qa.n == 0:
			q = a
		case qb.n == 0 || qb.n < qa.n:
			q = b
		default:
			q = a
		}
		if lv.queue[q].n == 0 {
			lv.queue[q].owner = flow
		}
	}
	w.level, w.lane = level, q
	lq := &lv.queue[q]
	w.lprev, w.lnext = lq.tail, nil
	if lq.tail != nil {
		lq.tail.lnext = w
	} else {
		lq.head = w
		lv.turns = append(lv.turns, q)
		// Waiting from now: no credit for the time it was idle.
		lq.served = max(lq.served, lv.clock)
	}
	lq.tail = w
	lq.n++
	lv.waiting++
}

// remove takes w out of its lanes.
func (ls *lanes) remove(w *waiter) {
	lv := &ls.level[w.level]
	lq := &lv.queue[w.lane]
	if w.lprev != nil {
		w.lprev.lnext = w.lnext
	} else {
		lq.head = w.lnext
	}
	if w.lnext != nil {
		w.lnext.lprev = w.lprev
	} else {
		lq.tail = w.lprev
	}
	w.lprev, w.lnext = nil, nil
	lq.n--
	lv.waiting--
	if lq.n == 0 {
		for i, q := range lv.turns {
			if q == w.lane {
				lv.turns = append(lv.turns[:i], lv.turns[i+1:]...)
				// The queue after it keeps its turn.
				if lv.turn > i {
					lv.turn--
				}
				break
			}
		}
		if lv.turn >= len(lv.turns) {
			lv.turn = 0
		}
	}
}

// next is the waiter a freed permit goes to, nil when none waits: of a
// level below its share, highest first, else of the highest level
// waiting; within it, the queue whose turn it is, and in that queue the
// oldest, or with newest (codel under overload) the newest. It takes no
// waiter out: the caller decides it, which removes it.
func (ls *lanes) next(newest bool) *waiter {
	for l := Critical; ; l-- {
		if ls.level[l].waiting > 0 && ls.held[l] < ls.share[l] {
			return ls.level[l].pick(newest)
		}
		if l == Sheddable {
			break
		}
	}
	for l := Critical; ; l-- {
		if ls.level[l].waiting > 0 {
			return ls.level[l].pick(newest)
		}
		if l == Sheddable {
			return nil
		}
	}
}

// pick is the waiter of the queue served least, the first of them from
// the turn on where several tie; it moves nothing (see took).
func (lv *levelLanes) pick(newest bool) *waiter {
	n := len(lv.turns)
	best := &lv.queue[lv.turns[lv.turn]]
	for i := 1; i < n; i++ {
		if q := &lv.queue[lv.turns[(lv.turn+i)%n]]; q.served < best.served {
			best = q
		}
	}
	if newest {
		return best.tail
	}
	return best.head
}

// took charges w's queue for the permit w is about to be admitted with,
// before w leaves the lanes, and returns the charge: the queue's cost,
// else the level's. The level's clock moves to the queue's served count,
// and the next search starts after it.
func (ls *lanes) took(w *waiter) time.Duration {
	lv := &ls.level[w.level]
	q := &lv.queue[w.lane]
	charge := q.cost
	if charge == 0 {
		charge = lv.cost
	}
	lv.clock = max(lv.clock, q.served)
	q.served += charge
	for i, t := range lv.turns {
		if t == w.lane {
			lv.turn = (i + 1) % len(lv.turns)
			break
		}
	}
	return charge
}

// settle corrects what a request admitted from lane of level was charged
// for its turn to what it was served for, and learns its cost.
func (ls *lanes) settle(level Level, lane uint8, charged, service time.Duration) {
	lv := &ls.level[level]
	q := &lv.queue[lane]
	q.served += service - charged
	q.cost = movingMean(q.cost, service)
	lv.cost = movingMean(lv.cost, service)
}

func movingMean(mean, d time.Duration) time.Duration {
	if mean == 0 {
		return d
	}
	return mean + (d-mean)/costMemory
}

// shed is the waiter a full queue turns away for a newcomer of level: the
// newest of the lowest level waiting, below level, from its longest queue
// (the flow that sends most); nil when none waits below level.
func (ls *lanes) shed(level Level) *waiter {
	for l := Sheddable; l < level; l++ {
		lv := &ls.level[l]
		if lv.waiting == 0 {
			continue
		}
		longest := &lv.queue[lv.turns[0]]
		for _, q := range lv.turns[1:] {
			if lv.queue[q].n > longest.n {
				longest = &lv.queue[q]
			}
		}
		return longest.tail
	}
	return nil
}

// mayTake reports whether a request of level may take one of free
// permits at now: one below its level's share may; another only while
// more are free than the shares of the other active levels still hold
// for them. A level is active while it holds a permit or waits, and for
// shareHold after its last release: its share is lent only while it is
// idle, so that its next request finds its permit free the moment it
// comes, rather than a service time later when the permits it lent come
// back. Behind an upstream whose requests end together (a pool at a fixed
// service time) a level's clients are all between requests at once, and
// the permits it freed would be gone before they return.
func (ls *lanes) mayTake(level Level, free int, now time.Time) bool {
	if ls.held[level] < ls.share[level] {
		return true
	}
	held := 0
	for l := range ls.share {
		if Level(l) == level || ls.share[l] <= ls.held[l] {
			continue
		}
		if ls.held[l] > 0 || ls.level[l].waiting > 0 || now.Sub(ls.released[l]) < shareHold {
			held += ls.share[l] - ls.held[l]
		}
	}
	return free > held
}

// shareHold is how long a level that had requests keeps its share held
// for it once it has none: longer than a client takes between one answer
// and its next request, short enough that a level that stopped lends its
// share within a second.
const shareHold = time.Second

// waiting is how many wait at level.
func (ls *lanes) waiting(level Level) int { return ls.level[level].waiting }
