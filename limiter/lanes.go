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
// shorter. So each flow with waiters has a queue of its own, and one
// turn a round, unless both queues of its hand are taken by others: with
// k other flows waiting, about (k/64)^2 of the time, 0.4% for k = 4. 64
// queues keep the state a few kilobytes whatever the flows.
const flowQueues = 64

// lanes order a Limiter's waiters by level and, within a level, fairly
// between flows: a freed permit goes to a level below its guaranteed
// share first, then to the highest level waiting, as far as the shares of
// the other active levels leave it free (see mayTake); within the level,
// the queues with waiters take turns (round robin, each request one
// turn), FIFO within a queue.
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
	turn    int     // whose turn is next, an index of turns
	waiting int
}

// laneQueue is one queue of a level, FIFO by the waiters' lane links.
type laneQueue struct {
	head, tail *waiter
	n          int
	// owner is the flow whose request found it empty: while it has
	// waiters, that flow's requests join it.
	owner uint64
}

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

// pick is the waiter whose turn it is, and moves the turn on.
func (lv *levelLanes) pick(newest bool) *waiter {
	q := &lv.queue[lv.turns[lv.turn]]
	lv.turn = (lv.turn + 1) % len(lv.turns)
	if newest {
		return q.tail
	}
	return q.head
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
