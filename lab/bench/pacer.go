package bench

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"
)

// The two pacings of the load engine (load.go).

// closedPacing is a closed loop: a client per URI, each on its own
// connection, each sending its next request as soon as the previous one is
// answered. There is no think time, so the load is exactly as many
// requests in flight as clients.
type closedPacing struct {
	uris []string
	// errorPause, if set, is how long a client waits after an answer that
	// is not 2xx or a failed request.
	errorPause time.Duration
}

func (p closedPacing) clients() int { return len(p.uris) }
func (closedPacing) byDue() bool    { return false }

// connectPause is how long a closed-loop client waits after failing to
// connect. A refused dial fails in microseconds: without a pause, C clients
// would spin the cores the target and the rig need, counting errors.
const connectPause = 10 * time.Millisecond

func (p closedPacing) drive(ctx context.Context, e *engine) {
	var wg sync.WaitGroup
	for _, uri := range p.uris {
		// One connection per virtual user over HTTP/1.1, as a real
		// client has: C users hold C connections, so the target sees C
		// concurrent requests and not however many a shared pool
		// happens to open. Over HTTP/2, C streams on the shared
		// connections.
		send, rec := e.userSender(uri), e.tally.newRecorder()
		wg.Go(func() {
			defer rec.flush()
			for !e.stop.Load() && closedOnce(e, send, rec, p.errorPause) {
			}
		})
	}
	wg.Wait()
}

// closedOnce sends one request, due now, and reports whether there is time
// for another before the window's end, where a request in flight is cut
// (and, completing after the window, not counted). After a failed
// connection it waits connectPause, after any other answer that is not 2xx
// errorPause.
func closedOnce(e *engine, send func(time.Time) answer, rec *recorder, errorPause time.Duration) bool {
	now := time.Now()
	if !now.Before(e.win.end) {
		return false
	}
	done, a := e.do(send, rec, now)
	var pause time.Duration
	switch k := classify(a.err, a.status); {
	case k == kindConnect:
		pause = max(connectPause, errorPause)
	case k != kindOK:
		pause = errorPause
	}
	if pause = min(pause, e.win.end.Sub(done)); pause > 0 {
		time.Sleep(pause)
	}
	return done.Before(e.win.end)
}

// closedLine is the closed loop's progress: the throughput of the last
// second, successes only, and the errors so far.
func closedLine() func(*engine, string, float64) string {
	var last int64
	return func(e *engine, phase string, secs float64) string {
		ok, errs := e.tally.live()
		rps := float64(ok-last) / secs
		last = ok
		return fmt.Sprintf("%s, %.0f rps, %d errors", phase, rps, errs)
	}
}

// openPacing is an open loop: request i is due at start + i / rate,
// whatever became of the requests before it, and goes to an idle worker,
// or a new one while fewer than maxInFlight exist, or is not sent.
type openPacing struct {
	rate        float64
	maxInFlight int
	pause       func(i int64) // a test's, called as request i is due

	// Only the dispatching goroutine touches these.
	workers            int
	dueWin, notSentWin int64
}

func (p *openPacing) clients() int { return p.maxInFlight }
func (*openPacing) byDue() bool    { return true }

// pacerQuantum is the shortest sleep of the pacer. Above 1000 rps the
// requests due within a millisecond go out together when it wakes, up to
// a millisecond late (their latency still counts from when they were
// due), as wrk2's millisecond timers send them. A wake per request costs
// more than the request: on two cores, sleeping to each due time kept to
// schedule up to 10000 rps, this up to 18000.
const pacerQuantum = time.Millisecond

// drive walks the schedule until the window's end. When it wakes late it
// sends everything already due at once, as the arrivals would have come;
// each request still carries the time it was due.
func (p *openPacing) drive(ctx context.Context, e *engine) {
	// jobs hands a due request to an idle worker. It is unbuffered, so a
	// send succeeds only if a worker is waiting: a request never sits in
	// a queue of the rig's own.
	jobs := make(chan time.Time)
	var wg sync.WaitGroup
	// As many connections (or streams) as requests in flight, and no wait
	// for one: the cap is enforced, and counted, here.
	newSender := e.workerSenders(p.maxInFlight)
	worker := func(due time.Time) {
		defer wg.Done()
		rec, send := e.tally.newRecorder(), newSender()
		defer rec.flush()
		for ok := true; ok; due, ok = <-jobs {
			e.do(send, rec, due)
		}
	}
	sched := pacer{start: e.begin, rate: p.rate}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for i := int64(0); !e.stop.Load(); i++ {
		due := sched.due(i)
		if !due.Before(e.win.end) {
			break
		}
		if d := time.Until(due); d > 0 {
			timer.Reset(max(d, pacerQuantum))
			select {
			case <-ctx.Done():
			case <-timer.C:
			}
			if ctx.Err() != nil {
				break
			}
		}
		if p.pause != nil {
			p.pause(i)
		}
		inWin := e.win.contains(due)
		if inWin {
			p.dueWin++
		}
		select {
		case jobs <- due:
			continue
		default:
		}
		if p.workers < p.maxInFlight {
			p.workers++
			wg.Add(1)
			go worker(due)
			continue
		}
		e.liveNotSent.Add(1)
		if inWin {
			p.notSentWin++
		}
	}
	close(jobs)
	wg.Wait()
}

// openLine is the open loop's progress: sends and 2xx per second over the
// last second, in flight now, and the answers that were not 2xx and the
// requests not sent so far.
func openLine() func(*engine, string, float64) string {
	var lastSent, lastOK int64
	return func(e *engine, phase string, secs float64) string {
		sent := e.liveSent.Load()
		ok, errs := e.tally.live()
		line := fmt.Sprintf("%s, sent %.0f/s, 2xx %.0f/s, in flight %d, %d not 2xx, %d not sent",
			phase, float64(sent-lastSent)/secs, float64(ok-lastOK)/secs, e.inFlight.Load(), errs, e.liveNotSent.Load())
		lastSent, lastOK = sent, ok
		return line
	}
}

// pacer is a constant arrival rate: request i is due at start + i / rate,
// whatever became of the requests before it.
//
// Each due time is computed from i, never by adding an interval to the
// previous one, so rounding cannot accumulate: at 3 rps request 3 is due at
// exactly one second.
type pacer struct {
	start time.Time
	rate  float64 // requests per second, > 0
}

// offset is when request i is due, relative to start, to the nanosecond.
func (p pacer) offset(i int64) time.Duration {
	return time.Duration(math.Round(float64(i) * float64(time.Second) / p.rate))
}

// due is when request i is due.
func (p pacer) due(i int64) time.Time { return p.start.Add(p.offset(i)) }

// first is the index of the first request due at or after start + d.
func (p pacer) first(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	// Rounding in offset can put the request at the boundary on either
	// side of it; step from the estimate to the exact answer.
	i := int64(math.Ceil(d.Seconds() * p.rate))
	for i > 0 && p.offset(i-1) >= d {
		i--
	}
	for p.offset(i) < d {
		i++
	}
	return i
}

// between is how many requests are due in [start+from, start+to).
func (p pacer) between(from, to time.Duration) int64 {
	return max(p.first(to)-p.first(from), 0)
}
