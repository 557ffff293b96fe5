package advice

import (
	"context"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/loomgate/loomgate/internal/outcome"
	"github.com/loomgate/loomgate/limiter"
)

// synthRoute is one route of a synthetic upstream: its unloaded service
// times, drawn evenly from lo to hi, the pool it needs (an index into
// synth.pools, or -1 for none), and each client's own time between an
// answer and its next request (the network and the client itself).
type synthRoute struct {
	path   string
	lo, hi time.Duration
	pool   int
	think  time.Duration
}

// synthPhase is a span of time and the clients each route has in it, or
// with rates, the requests a second that arrive for each route whatever
// the latency (open demand, Poisson arrivals).
type synthPhase struct {
	d       time.Duration
	clients []int
	rates   []float64
}

// synth is a closed loop of clients, loomgate's admission and an upstream
// whose pools queue what exceeds them, FIFO. It plays its phases through an
// Advisor the way the sidecar does: each finished request is Recorded when
// it finishes, and Run samples in flight and queued from the same state.
type synth struct {
	routes []synthRoute
	pools  []int
	// settings are loomgate's: Fixed with Workers caps admission, the rest
	// waiting in its queue.
	settings Settings
	phases   []synthPhase
	// resize, if set, gives pools new sizes as the phase of that index
	// starts: a pool shrunk serves no more than its new size from then on,
	// its requests above it finishing first.
	resize map[int][]int
	// answered, if set, is told of each answer: when its request arrived,
	// since the start, and how long it took, queue and service.
	answered func(arrived, latency time.Duration)
}

type synthReq struct {
	route             int
	arrived, admitted time.Duration
	open              bool
	phase             int
}

type synthEvent struct {
	at   time.Duration
	kind int // 0 arrival, 1 completion, 2 phase, 3 open arrival
	req  synthReq
}

// play runs s in a synctest bubble and returns the Advisor's snapshot at
// the end of the last phase.
func (s synth) play(t *testing.T) Snapshot {
	t.Helper()
	var snap Snapshot
	synctest.Test(t, func(t *testing.T) {
		var inFlight, queued atomic.Int64
		a, err := New(Config{Settings: s.settings, State: func() State {
			return State{InFlight: inFlight.Load(), Queued: queued.Load()}
		}})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { a.Run(ctx); close(done) }()
		s.run(a, &inFlight, &queued)
		snap = a.Snapshot()
		cancel()
		<-done
	})
	return snap
}

func (s synth) run(a *Advisor, inFlight, queued *atomic.Int64) {
	rng := rand.New(rand.NewPCG(7, 11))
	start := time.Now()
	var events eventQueue
	var end time.Duration
	for _, p := range s.phases {
		events.push(synthEvent{at: end, kind: 2})
		end += p.d
	}
	busy := make([]int, len(s.pools))
	poolQ := make([][]synthReq, len(s.pools))
	var admitQ []synthReq
	admitted := 0
	alive := make([]int, len(s.routes))
	want := make([]int, len(s.routes))
	phase := 0
	// Each route's class, as the proxy classifies a request at admission.
	samples := make([]outcome.Record, len(s.routes))
	for i, r := range s.routes {
		class := a.Routes().Class([]byte("GET"), []byte(r.path))
		samples[i] = outcome.Record{Method: []byte("GET"), Target: []byte(r.path), Class: class, Admission: true, Admitted: true, UpstreamStatus: 200}
	}
	draw := func(r synthRoute) time.Duration {
		return r.lo + time.Duration(rng.Float64()*float64(r.hi-r.lo))
	}
	var now time.Duration
	serve := func(q synthReq) {
		r := s.routes[q.route]
		events.push(synthEvent{at: now + draw(r), kind: 1, req: q})
	}
	send := func(q synthReq) {
		admitted++
		q.admitted = now
		if p := s.routes[q.route].pool; p >= 0 {
			if busy[p] >= s.pools[p] {
				poolQ[p] = append(poolQ[p], q)
				return
			}
			busy[p]++
		}
		serve(q)
	}
	arrive := func(q synthReq) {
		q.arrived = now
		if s.settings.Mode == limiter.Fixed && admitted >= s.settings.Workers {
			if len(admitQ) >= s.settings.QueueSize {
				a.Record(&outcome.Record{Kind: outcome.RejectedQueueFull, Class: samples[q.route].Class, Admission: true})
				if !q.open {
					events.push(synthEvent{at: now + s.routes[q.route].think + s.routes[q.route].lo, kind: 0, req: synthReq{route: q.route}})
				}
				return
			}
			admitQ = append(admitQ, q)
			return
		}
		send(q)
	}
	for len(events.q) > 0 {
		e := events.pop()
		if e.at >= end {
			break
		}
		// Sleep to the event, a millisecond at a time at most: Record
		// reads the clock, and a millisecond is nothing to a bucket.
		if ahead := e.at - time.Since(start); ahead >= time.Millisecond {
			time.Sleep(ahead)
		}
		now = e.at
		switch e.kind {
		case 2:
			if sizes, ok := s.resize[phase]; ok {
				s.pools = sizes
				for p := range poolQ {
					for busy[p] < s.pools[p] && len(poolQ[p]) > 0 {
						next := poolQ[p][0]
						poolQ[p] = poolQ[p][1:]
						busy[p]++
						serve(next)
					}
				}
			}
			want = s.phases[phase].clients
			if want == nil {
				want = make([]int, len(s.routes))
			}
			for r, rate := range s.phases[phase].rates {
				if rate > 0 {
					events.push(synthEvent{at: now + time.Duration(rng.ExpFloat64()/rate*float64(time.Second)), kind: 3, req: synthReq{route: r, open: true, phase: phase}})
				}
			}
			phase++
			for r := range s.routes {
				for alive[r] < want[r] {
					alive[r]++
					events.push(synthEvent{at: now + time.Duration(alive[r])*time.Microsecond, kind: 0, req: synthReq{route: r}})
				}
			}
		case 0:
			arrive(e.req)
		case 3:
			q := e.req
			if q.phase != phase-1 {
				break // the phase that sent them is over
			}
			arrive(q)
			rate := s.phases[q.phase].rates[q.route]
			events.push(synthEvent{at: now + time.Duration(rng.ExpFloat64()/rate*float64(time.Second)), kind: 3, req: q})
		case 1:
			q := e.req
			admitted--
			if p := s.routes[q.route].pool; p >= 0 {
				busy[p]--
				if len(poolQ[p]) > 0 && busy[p] < s.pools[p] {
					next := poolQ[p][0]
					poolQ[p] = poolQ[p][1:]
					busy[p]++
					serve(next)
				}
			}
			smp := &samples[q.route]
			smp.Queue, smp.Service = q.admitted-q.arrived, now-q.admitted
			a.Record(smp)
			if s.answered != nil {
				s.answered(q.arrived, now-q.arrived)
			}
			if len(admitQ) > 0 && admitted < s.settings.Workers {
				next := admitQ[0]
				admitQ = admitQ[1:]
				send(next)
			}
			r := q.route
			if q.open {
				break
			}
			if alive[r] > want[r] {
				alive[r]--
			} else {
				events.push(synthEvent{at: now + s.routes[r].think, kind: 0, req: synthReq{route: r}})
			}
		}
		inFlight.Store(int64(admitted))
		queued.Store(int64(len(admitQ)))
	}
	time.Sleep(start.Add(end).Sub(time.Now()))
}

// eventQueue is a min-heap of synthEvents by time, ties in push order.
type eventQueue struct {
	q   []synthEvent
	seq []int
	n   int
}

func (h *eventQueue) less(i, j int) bool {
	if h.q[i].at != h.q[j].at {
		return h.q[i].at < h.q[j].at
	}
	return h.seq[i] < h.seq[j]
}

func (h *eventQueue) swap(i, j int) {
	h.q[i], h.q[j] = h.q[j], h.q[i]
	h.seq[i], h.seq[j] = h.seq[j], h.seq[i]
}

func (h *eventQueue) push(e synthEvent) {
	h.q = append(h.q, e)
	h.seq = append(h.seq, h.n)
	h.n++
	for i := len(h.q) - 1; i > 0; {
		p := (i - 1) / 2
		if !h.less(i, p) {
			break
		}
		h.swap(i, p)
		i = p
	}
}

func (h *eventQueue) pop() synthEvent {
	top := h.q[0]
	last := len(h.q) - 1
	h.swap(0, last)
	h.q, h.seq = h.q[:last], h.seq[:last]
	for i := 0; ; {
		small, l, r := i, 2*i+1, 2*i+2
		if l < len(h.q) && h.less(l, small) {
			small = l
		}
		if r < len(h.q) && h.less(r, small) {
			small = r
		}
		if small == i {
			break
		}
		h.swap(i, small)
		i = small
	}
	return top
}
