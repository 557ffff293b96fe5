package limiter

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// tryLevel, waitLevel and leaveLevel are a request of level (in flow)
// through the Policy's Admit, Wait and Leave, holding no bytes.
func tryLevel(l *Limiter, level Level) error { return l.Admit(time.Now(), &Request{Level: level}) }

func waitLevel(ctx context.Context, l *Limiter, level Level, flow uint64) error {
	return l.Wait(ctx, &Request{Level: level, Flow: flow})
}

func leaveLevel(l *Limiter, level Level) { l.Leave(time.Now(), &Request{Level: level}, 0) }

// queueAt starts a wait of level in flow and lets it reach the queue.
func queueAt(l *Limiter, level Level, flow uint64) <-chan error {
	done := make(chan error, 1)
	go func() { done <- waitLevel(context.Background(), l, level, flow) }()
	synctest.Wait()
	return done
}

// admittedOf releases one permit of level and reports which of waits was
// admitted by it (-1 for none).
func admittedOf(t *testing.T, l *Limiter, level Level, waits []<-chan error) int {
	t.Helper()
	leaveLevel(l, level)
	synctest.Wait()
	got := -1
	for i, ch := range waits {
		select {
		case err := <-ch:
			if err != nil {
				t.Fatalf("waiter %d: %v", i, err)
			}
			if got >= 0 {
				t.Fatalf("one release admitted %d and %d", got, i)
			}
			got = i
		default:
		}
	}
	return got
}

func fill(t *testing.T, l *Limiter, n int, level Level) {
	t.Helper()
	for range n {
		if err := tryLevel(l, level); err != nil {
			t.Fatal(err)
		}
	}
}

// A freed permit goes to the highest level waiting, FIFO within it.
func TestPrioritiesHighestFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := mustNew(t, Config{Mode: Fixed, Workers: 1, QueueSize: 10, QueueTimeout: time.Minute, Priorities: true})
		fill(t, l, 1, Default)
		levels := []Level{Sheddable, Default, Sheddable, Critical, High, Critical}
		var waits []<-chan error
		for _, lv := range levels {
			waits = append(waits, queueAt(l, lv, 0))
		}
		want := []int{3, 5, 4, 1, 0, 2}
		prev := Default
		for _, w := range want {
			got := admittedOf(t, l, prev, waits)
			if got != w {
				t.Fatalf("admitted %d (%s); want %d (%s)", got, levels[max(got, 0)], w, levels[w])
			}
			prev = levels[got]
		}
	})
}

// A full queue sheds the newest of the lowest level for a higher
// newcomer; a newcomer no higher than any waiting is refused.
func TestPrioritiesShedTheLowest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := mustNew(t, Config{Mode: Fixed, Workers: 1, QueueSize: 2, QueueTimeout: time.Minute, Priorities: true})
		fill(t, l, 1, Default)
		s1, s2 := queueAt(l, Sheddable, 0), queueAt(l, Sheddable, 0)
		if err := tryLevel(l, Sheddable); !errors.Is(err, ErrQueueFull) {
			t.Fatalf("a sheddable newcomer to a queue full of sheddable: %v; want ErrQueueFull", err)
		}
		c := queueAt(l, Critical, 0)
		select {
		case err := <-s2:
			if !errors.Is(err, ErrQueueFull) {
				t.Fatalf("the newest sheddable: %v; want shed, ErrQueueFull", err)
			}
		default:
			t.Fatal("the newest sheddable still waits; want it shed for the critical newcomer")
		}
		if got := admittedOf(t, l, Default, []<-chan error{s1, c}); got != 1 {
			t.Errorf("admitted %d; want the critical", got)
		}
		if s := l.Stats(); s.Queued != 1 || s.InFlight != 1 {
			t.Errorf("Stats = %+v; want 1 in flight, the sheddable waiting", s)
		}
		l.RejectWaiting()
		synctest.Wait()
	})
}

// A level below its guaranteed share is served first: critical holds all
// 10 permits, the 20% the sheddable level is guaranteed come back to it as
// critical's requests finish, then critical's waiters go first again.
func TestPrioritiesShareComesBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := mustNew(t, Config{Mode: Fixed, Workers: 10, QueueSize: 100, QueueTimeout: time.Minute, Priorities: true,
			Shares: [NumLevels]int{Sheddable: 20}})
		fill(t, l, 10, Critical)
		var waits []<-chan error
		levels := []Level{Critical, Critical, Sheddable, Sheddable, Sheddable}
		for _, lv := range levels {
			waits = append(waits, queueAt(l, lv, 0))
		}
		var order []Level
		for range 4 {
			order = append(order, levels[admittedOf(t, l, Critical, waits)])
		}
		want := []Level{Sheddable, Sheddable, Critical, Critical}
		for i := range want {
			if order[i] != want[i] {
				t.Errorf("order %v; want %v", order, want)
			}
		}
		l.RejectWaiting()
		synctest.Wait()
	})
}

// A share is lent while its level is idle and comes back as the
// borrowers' requests finish; while the level is active, and for
// shareHold after its last request, it stays held for it even when it
// holds less.
func TestPrioritiesShareLentWhileIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := mustNew(t, Config{Mode: Fixed, Workers: 10, QueueSize: 100, QueueTimeout: time.Minute, Priorities: true,
			Shares: [NumLevels]int{Critical: 50}})
		// Critical has never come: its 5 are lent.
		fill(t, l, 10, Default)
		var crit []<-chan error
		for range 5 {
			crit = append(crit, queueAt(l, Critical, 0))
		}
		other := queueAt(l, Default, 0)
		// Borrowed back: each of 5 releases admits a critical waiter.
		for range 5 {
			if got := admittedOf(t, l, Default, crit); got < 0 {
				t.Fatal("a release admitted no critical waiter; want its share back")
			}
		}
		lv := l.Levels()
		if lv[Critical] != (LevelStats{5, 0}) || lv[Default] != (LevelStats{5, 1}) || lv[High] != (LevelStats{}) || lv[Sheddable] != (LevelStats{}) {
			t.Errorf("Levels = %+v; want critical 5 in flight, default 5 and 1 waiting", lv)
		}
		// Default holds 5, critical 5, one default waits. Critical
		// finishes two: its share holds them free for it.
		for range 2 {
			leaveLevel(l, Critical)
		}
		synctest.Wait()
		select {
		case <-other:
			t.Fatal("a default waiter took a permit critical's share holds while it is active")
		default:
		}
		if err := tryLevel(l, Default); err == nil {
			t.Fatal("a default newcomer took a permit critical's share holds while it is active")
		}
		// Idle past shareHold, critical's share is lent again: the next
		// release admits the default waiter and a newcomer finds one free.
		for range 3 {
			leaveLevel(l, Critical)
		}
		synctest.Wait()
		// Between its requests, critical holds nothing and waits for
		// nothing; its share stays held for shareHold.
		if err := tryLevel(l, Default); err == nil {
			t.Fatal("just after critical's last release, a default newcomer took a permit of its share")
		}
		time.Sleep(shareHold)
		leaveLevel(l, Default)
		synctest.Wait()
		select {
		case err := <-other:
			if err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("critical idle for %s, the default waiter still waits; want its share lent", shareHold)
		}
		if err := tryLevel(l, Default); err != nil {
			t.Errorf("critical idle for %s, a default newcomer: %v; want a lent permit", shareHold, err)
		}
		l.RejectWaiting()
		synctest.Wait()
	})
}

// admittedByFlow queues requests of the flows arrivals names, in order,
// at the Default level behind one held permit, and counts the first n a
// release admits by flow.
func admittedByFlow(t *testing.T, arrivals []uint64, n int) map[uint64]int {
	t.Helper()
	l := mustNew(t, Config{Mode: Fixed, Workers: 1, QueueSize: 100, QueueTimeout: time.Minute, Priorities: true})
	fill(t, l, 1, Default)
	var waits []<-chan error
	for _, f := range arrivals {
		waits = append(waits, queueAt(l, Default, f))
	}
	counts := map[uint64]int{}
	for range n {
		counts[arrivals[admittedOf(t, l, Default, waits)]]++
	}
	l.RejectWaiting()
	synctest.Wait()
	return counts
}

// Within a level, flows take turns: one flow with 9 waiting beside two
// with 3 each gets a turn in three while all wait.
func TestPrioritiesFlowsTakeTurns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		noisy, a, b := uint64(1)|1<<6, uint64(2)|2<<6, uint64(3)|3<<6
		arrivals := slices.Repeat([]uint64{noisy}, 9)
		for range 3 {
			arrivals = append(arrivals, a, b)
		}
		if c := admittedByFlow(t, arrivals, 9); c[noisy] != 3 || c[a] != 3 || c[b] != 3 {
			t.Errorf("the first 9 admitted by flow: noisy %d, a %d, b %d; want 3 each", c[noisy], c[a], c[b])
		}
	})
}

// A flow takes one turn a round however its hand falls: one whose two
// queues are one and the same and one with two empty queues, six waiting
// each, are admitted three and three.
func TestPrioritiesOneTurnPerFlow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		one, two := uint64(1)|1<<6, uint64(2)|3<<6 // queues {1}, {2, 3}
		var arrivals []uint64
		for range 6 {
			arrivals = append(arrivals, one, two)
		}
		if c := admittedByFlow(t, arrivals, 6); c[one] != 3 || c[two] != 3 {
			t.Errorf("the first 6 admitted by flow: one queue %d, two queues %d; want 3 each", c[one], c[two])
		}
	})
}

// Shares need priorities and may not add up to more than the limit.
func TestSharesWithoutPrioritiesRefused(t *testing.T) {
	_, err := New(Config{Mode: Fixed, Workers: 1, Shares: [NumLevels]int{Critical: 50}})
	if err == nil {
		t.Error("Shares without Priorities accepted")
	}
	_, err = New(Config{Mode: Fixed, Workers: 1, Priorities: true, Shares: [NumLevels]int{Critical: 60, Default: 60}})
	if err == nil {
		t.Error("Shares adding up to 120 accepted")
	}
}

// BenchmarkQueuedPriorities is admission where requests wait: 4 permits,
// many goroutines, with and without priorities and flows. With them, a
// waiter also stands in its level's lanes, and a release picks among them.
func BenchmarkQueuedPriorities(b *testing.B) {
	for _, tt := range []struct {
		name       string
		priorities bool
		shares     [NumLevels]int
	}{
		{"fifo", false, [NumLevels]int{}},
		{"priorities", true, [NumLevels]int{}},
		{"priorities+shares", true, [NumLevels]int{Critical: 50, Sheddable: 10}},
	} {
		b.Run(tt.name, func(b *testing.B) {
			l := mustNew(b, Config{Mode: Fixed, Workers: 4, QueueSize: 1 << 20, QueueTimeout: time.Hour, Priorities: tt.priorities, Shares: tt.shares})
			ctx := context.Background()
			var next atomic.Uint64
			b.ReportAllocs()
			b.SetParallelism(16)
			b.RunParallel(func(pb *testing.PB) {
				i := next.Add(1)
				level, flow := Default, uint64(0)
				if tt.priorities {
					level, flow = Level(i%uint64(NumLevels)), i*0x9e3779b97f4a7c15
				}
				for pb.Next() {
					if err := waitLevel(ctx, l, level, flow); err != nil {
						b.Fatal(err)
					}
					leaveLevel(l, level)
				}
			})
		})
	}
}

// Many clients leave at once, from every level and flow (a third of 40): their waiters
// leave the lanes with them, each with its context's error, none is
// admitted after, and the freed permits go to those left, highest level
// first, until nothing waits.
func TestPrioritiesWaitersLeaveTheLanes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := mustNew(t, Config{Mode: Fixed, Workers: 1, QueueSize: 100, QueueTimeout: time.Minute, Priorities: true})
		fill(t, l, 1, Default)
		type waiting struct {
			level  Level
			leaves bool
			done   chan error
		}
		ctx, leave := context.WithCancel(context.Background())
		var ws []*waiting
		for i := range 40 {
			w := &waiting{level: Level(i % int(NumLevels)), leaves: i%3 == 0, done: make(chan error, 1)}
			c := context.Background()
			if w.leaves {
				c = ctx
			}
			go func() { w.done <- waitLevel(c, l, w.level, uint64(i%5+1)) }()
			ws = append(ws, w)
		}
		synctest.Wait()
		leave()
		synctest.Wait()
		for i, w := range ws {
			if !w.leaves {
				continue
			}
			if err := <-w.done; !errors.Is(err, context.Canceled) {
				t.Fatalf("waiter %d left: %v; want context.Canceled", i, err)
			}
		}
		// 14 of the 40 left, from every level.
		if s := l.Stats(); s.Queued != 26 || s.InFlight != 1 {
			t.Fatalf("Stats after 14 left = %+v; want 26 waiting, 1 in flight", s)
		}
		prev, last := Default, Critical
		for range 26 {
			leaveLevel(l, prev)
			synctest.Wait()
			admitted := 0
			for _, w := range ws {
				select {
				case err := <-w.done:
					if err != nil {
						t.Fatalf("a waiter that stayed: %v", err)
					}
					if w.level > last {
						t.Fatalf("admitted %s after %s; want the highest level first", w.level, last)
					}
					prev, last = w.level, w.level
					admitted++
				default:
				}
			}
			if admitted != 1 {
				t.Fatalf("one release admitted %d", admitted)
			}
		}
		if s := l.Stats(); s.Queued != 0 || s.InFlight != 1 {
			t.Errorf("Stats at the end = %+v; want none waiting, 1 in flight", s)
		}
	})
}

// Flows share the permits' time, not the admissions: behind 2 permits, a
// flow of requests served in 100 ms and one of requests served in 10 ms,
// ten clients each, each hold the permits about half the time; counted
// in requests, as it was, the slow flow held ten elevenths of it. Flows
// of one cost still take turns, a request each.
func TestPrioritiesFlowsShareTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := mustNew(t, Config{Mode: Fixed, Workers: 2, QueueSize: 1000, QueueTimeout: time.Hour, Priorities: true})
		ctx, cancel := context.WithCancel(context.Background())
		slow, fast := uint64(1)|1<<6, uint64(2)|2<<6
		var held [2]atomic.Int64 // slow, fast: permit time, ns
		var served [2]atomic.Int64
		var wg sync.WaitGroup
		for i, flow := range []uint64{slow, fast} {
			service := []time.Duration{100 * time.Millisecond, 10 * time.Millisecond}[i]
			for range 10 {
				wg.Go(func() {
					for ctx.Err() == nil {
						r := Request{Level: Default, Flow: flow}
						if err := l.Wait(ctx, &r); err != nil {
							return
						}
						time.Sleep(service)
						r.Service = service
						held[i].Add(int64(service))
						served[i].Add(1)
						l.Leave(time.Now(), &r, 0)
					}
				})
			}
		}
		time.Sleep(20 * time.Second)
		cancel()
		wg.Wait()
		s, f := float64(held[0].Load()), float64(held[1].Load())
		share := s / (s + f)
		t.Logf("slow flow: %d requests, %.0f%% of the permits' time; fast flow: %d requests", served[0].Load(), 100*share, served[1].Load())
		if share < 0.4 || share > 0.6 {
			t.Errorf("the slow flow held %.0f%% of the permits' time; want about half (40%% to 60%%)", 100*share)
		}
	})
}
