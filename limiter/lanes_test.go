package limiter

import (
	"testing"
	"time"
)

// lanesOf pushes a waiter for each (level, flow) in order and returns them.
func lanesOf(ls *lanes, reqs ...[2]uint64) []*waiter {
	var ws []*waiter
	for _, r := range reqs {
		w := &waiter{}
		ls.push(w, Level(r[0]), r[1])
		ws = append(ws, w)
	}
	return ws
}

// drain takes every waiter in the order next gives them, each admitted as
// the Limiter admits one (took, then out of the lanes) and holding a
// permit of its level until the end.
func drain(ls *lanes, newest bool) []*waiter {
	var out []*waiter
	for w := ls.next(newest); w != nil; w = ls.next(newest) {
		ls.took(w)
		ls.remove(w)
		ls.held[w.level]++
		out = append(out, w)
	}
	return out
}

func index(ws []*waiter, w *waiter) int {
	for i, x := range ws {
		if x == w {
			return i
		}
	}
	return -1
}

func TestLanesHighestLevelFirst(t *testing.T) {
	var ls lanes
	ws := lanesOf(&ls, [2]uint64{uint64(Sheddable), 0}, [2]uint64{uint64(Default), 0}, [2]uint64{uint64(Critical), 0},
		[2]uint64{uint64(Sheddable), 0}, [2]uint64{uint64(High), 0}, [2]uint64{uint64(Critical), 0})
	got := drain(&ls, false)
	// Critical (2, 5), high (4), default (1), sheddable (0, 3): FIFO within.
	want := []*waiter{ws[2], ws[5], ws[4], ws[1], ws[0], ws[3]}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("order %v; want %v", indexes(ws, got), indexes(ws, want))
		}
	}
}

func indexes(ws, of []*waiter) []int {
	var out []int
	for _, w := range of {
		out = append(out, index(ws, w))
	}
	return out
}

// A level below its guaranteed share is served before a higher one above
// its own: a permit lent while it was idle comes back at the next release.
func TestLanesShareComesBackFirst(t *testing.T) {
	var ls lanes
	ls.share[Sheddable] = 2
	ls.held[Critical] = 10 // critical took the idle share, and more
	ws := lanesOf(&ls, [2]uint64{uint64(Critical), 0}, [2]uint64{uint64(Critical), 0}, [2]uint64{uint64(Sheddable), 0},
		[2]uint64{uint64(Sheddable), 0}, [2]uint64{uint64(Sheddable), 0})
	got := indexes(ws, drain(&ls, false))
	// Two sheddable up to their share, then critical, then the third.
	want := []int{2, 3, 0, 1, 4}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("order %v; want %v", got, want)
		}
	}
}

// Within a level, flows take turns: one flow with 30 waiting and two with
// 3 each are served a request each in turn while all three wait.
func TestLanesFlowsTakeTurns(t *testing.T) {
	var ls lanes
	var reqs [][2]uint64
	noisy, a, b := uint64(1)|1<<6, uint64(2)|2<<6, uint64(3)|3<<6 // each its own queues
	for range 30 {
		reqs = append(reqs, [2]uint64{uint64(Default), noisy})
	}
	for range 3 {
		reqs = append(reqs, [2]uint64{uint64(Default), a}, [2]uint64{uint64(Default), b})
	}
	ws := lanesOf(&ls, reqs...)
	got := drain(&ls, false)
	// Of the first 9 served, the small flows have all 6 of theirs... but
	// the noisy flow spreads over its hand of two queues: it has 2 turns a
	// round to their 1 each, 6 in the first 12.
	small := 0
	for _, w := range got[:12] {
		if i := index(ws, w); i >= 30 {
			small++
		}
	}
	if small != 6 {
		t.Errorf("%d of the small flows' 6 served in the first 12; want all (order %v)", small, indexes(ws, got))
	}
}

// A full queue sheds the newest of the lowest level below the newcomer's,
// from its longest queue, and nothing for a newcomer of the lowest.
func TestLanesShed(t *testing.T) {
	var ls lanes
	ws := lanesOf(&ls, [2]uint64{uint64(Default), 0}, [2]uint64{uint64(Sheddable), 5 | 5<<6}, [2]uint64{uint64(Sheddable), 9 | 9<<6},
		[2]uint64{uint64(Sheddable), 5 | 5<<6}, [2]uint64{uint64(Critical), 0})
	if w := ls.shed(Critical); w != ws[3] {
		t.Errorf("shed for a critical newcomer: %d; want 3, the newest of the longest sheddable queue", index(ws, w))
	}
	if w := ls.shed(Sheddable); w != nil {
		t.Errorf("shed for a sheddable newcomer: %d; want none", index(ws, w))
	}
	ls.remove(ws[1])
	ls.remove(ws[2])
	ls.remove(ws[3])
	if w := ls.shed(Critical); w != ws[0] {
		t.Errorf("shed with no sheddable left: %d; want 0, the default", index(ws, w))
	}
	if w := ls.shed(Default); w != nil {
		t.Errorf("shed for a default newcomer with none below: %d; want none", index(ws, w))
	}
}

// With codel under overload the newest of the chosen queue goes first.
func TestLanesNewest(t *testing.T) {
	var ls lanes
	ws := lanesOf(&ls, [2]uint64{uint64(Default), 0}, [2]uint64{uint64(Default), 0}, [2]uint64{uint64(Default), 0})
	if got := indexes(ws, drain(&ls, true)); got[0] != 2 || got[1] != 1 || got[2] != 0 {
		t.Errorf("order %v; want 2, 1, 0", got)
	}
}

// A queue that starts waiting starts at the level's clock: a flow idle
// while another was served for a minute banks nothing, and the two take
// turns from then on rather than the newcomer taking every permit until
// it has caught up.
func TestLanesIdleFlowBanksNothing(t *testing.T) {
	var ls lanes
	busy, idle := uint64(1)|1<<6, uint64(2)|2<<6
	for range 60 {
		w := lanesOf(&ls, [2]uint64{uint64(Default), busy})[0]
		charged := ls.took(w)
		ls.remove(w)
		ls.settle(Default, w.lane, charged, time.Second)
	}
	var reqs [][2]uint64
	for range 4 {
		reqs = append(reqs, [2]uint64{uint64(Default), busy}, [2]uint64{uint64(Default), idle})
	}
	ws := lanesOf(&ls, reqs...)
	got := indexes(ws, drain(&ls, false))
	// Alternating: the busy flow's are the even indexes.
	for i := 0; i+1 < 6; i += 2 {
		if got[i]%2 == got[i+1]%2 {
			t.Fatalf("order %v; want the two flows in turn", got)
		}
	}
}
