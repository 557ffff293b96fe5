package limiter

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Would is what a Shadow's policy would have done with a request.
type Would int

const (
	// WouldAdmit: admitted at once.
	WouldAdmit Would = iota
	// WouldQueue: admitted after a wait (Decision.Wait).
	WouldQueue
	// WouldReject: rejected (Decision.Err says why), at once or after a
	// wait.
	WouldReject
)

// Decision is what the policy would have done with one request.
type Decision struct {
	Would Would
	// Wait is how long the request would have waited for admission or
	// rejection.
	Wait time.Duration
	// Err is the rejection (ErrQueueFull, ErrQueueTimeout,
	// ErrBulkheadFull, ErrMemoryFull) when Would is WouldReject.
	Err error
	// Level is the request's priority level.
	Level Level
}

// Shadow runs a Limiter beside traffic that it does not hold back: a dry
// run. Each request arrives at the shadow as it arrives for real, is
// admitted, queued or rejected there as the policy says, and once admitted
// holds its shadow permit for as long as it was really served, from the
// moment the shadow admitted it. So the shadow's queue grows and drains as
// the real one would have, on the real arrivals and service times.
//
// What it cannot see directly is how the upstream would have answered the
// lighter load a real limit gives it. That matters most where the upstream
// holds more than it can serve at once and the excess waits inside it:
// service times then stretch with the requests it holds, which the policy
// would have kept out, and an answer comes seconds after the request that
// a real limit would have had served long before. Held for those service
// times, the shadow served a fraction of what the upstream really did,
// and its queue grew without end where a real limit's stood still. Given
// the upstream's capacity (SetCapacity), a request that found the upstream
// holding more than that holds its shadow place for the time it would
// have taken at the shadow's concurrency: the service time at capacity
// the shadow learns from the answers (each one's service time over the
// stretch it met), times the shadow's requests in flight over the
// capacity where they are more. That time is learnt here, not taken from
// the advice's unloaded speeds, because it must agree with the capacity
// it is scaled by: given a capacity that is only a bound (the calmest
// load seen was past the knee), a request served at it is slower than
// unloaded, and this learns how much slower.
type Shadow struct {
	lim    *Limiter
	report func(Decision)

	// inFlight is the requests really in flight, which the upstream holds.
	inFlight atomic.Int64
	// capacity is the float64 bits of SetCapacity's last value.
	capacity atomic.Uint64

	mu sync.Mutex
	// atCapacity is a moving mean of the answers' service times at the
	// upstream's capacity; 0 until the first answer.
	atCapacity time.Duration

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// NewShadow runs lim as a dry run, telling report of every decision.
// report is called from the request's goroutine or, for a request that
// would have waited, from a goroutine of the shadow's; it must not block.
func NewShadow(lim *Limiter, report func(Decision)) *Shadow {
	ctx, cancel := context.WithCancel(context.Background())
	return &Shadow{lim: lim, report: report, ctx: ctx, cancel: cancel}
}

// SetCapacity tells the shadow how many requests the upstream serves at
// once before it queues them inside; 0 (or less) when that is unknown, and
// service times are then taken as they were.
func (s *Shadow) SetCapacity(c float64) {
	s.capacity.Store(math.Float64bits(max(c, 0)))
}

// Limiter is the shadow's limiter, for its Stats and, in Adaptive mode,
// its controller.
func (s *Shadow) Limiter() *Limiter { return s.lim }

// Ticket is one request's place in the shadow.
type Ticket struct {
	s *Shadow
	// req is the ticket as the shadow's Limiter sees it (its bytes, level
	// and flow), from Admit or Wait to Leave.
	req     Request
	arrived time.Time
	// upstreamHeld is the requests really in flight when it arrived,
	// itself included.
	upstreamHeld int64

	mu sync.Mutex
	// admittedAt is when the shadow admitted it; zero while it waits or
	// when it was rejected.
	admittedAt time.Time
	// service is the real service time, set by Leave; done says it is.
	service time.Duration
	done    bool
	// held is set while the ticket holds a shadow permit, and releasing
	// once its return is scheduled.
	held, releasing bool
	// atOnce is the shadow's requests in flight when it was admitted
	// there, itself included.
	atOnce int64
}

// Arrive puts a request that will hold bytes, of level and flow, into the
// shadow, now.
func (s *Shadow) Arrive(bytes int64, level Level, flow uint64) *Ticket {
	t := &Ticket{s: s, req: Request{Bytes: bytes, Level: level, Flow: flow}, arrived: time.Now(), upstreamHeld: s.inFlight.Add(1)}
	// Through the Policy's Admit, Wait and Leave, as a real request: with
	// priorities its flow is charged the time it holds its shadow permit.
	switch err := s.lim.Admit(t.arrived, &t.req); err {
	case nil:
		t.admit(t.arrived)
		s.report(Decision{Would: WouldAdmit, Level: level})
	case ErrMustWait:
		// A wait needs a goroutine: Acquire blocks. It is the shadow's
		// own, so the real request goes on at once.
		s.wg.Go(func() { t.wait() })
	default:
		s.report(Decision{Would: WouldReject, Err: err, Level: level})
	}
	return t
}

func (t *Ticket) wait() {
	err := t.s.lim.Wait(t.s.ctx, &t.req)
	now := time.Now()
	wait := now.Sub(t.arrived)
	if err != nil {
		if t.s.ctx.Err() == nil {
			t.s.report(Decision{Would: WouldReject, Wait: wait, Err: err, Level: t.req.Level})
		}
		return
	}
	t.s.report(Decision{Would: WouldQueue, Wait: wait, Level: t.req.Level})
	t.admit(now)
}

// admit holds the ticket's shadow permit from now, and schedules its
// return where the time it would have been served is known: it was
// really served already (and in the shadow is served now, for as long,
// at the shadow's concurrency), or the upstream held more than its
// capacity when it arrived, and the service time at capacity says.
// Otherwise Leave schedules it.
func (t *Ticket) admit(now time.Time) {
	atOnce := t.s.lim.Stats().InFlight
	c := t.s.capacityNow()
	t.mu.Lock()
	t.admittedAt, t.held, t.atOnce = now, true, atOnce
	var hold time.Duration
	switch {
	case t.done:
		hold, t.releasing = t.s.shadowService(t.service, t.upstreamHeld, atOnce, c), true
	case c > 0 && float64(t.upstreamHeld) > c:
		if u := t.s.serviceAtCapacity(); u > 0 {
			hold, t.releasing = time.Duration(float64(u)*max(1, float64(atOnce)/c)), true
		}
	}
	releasing := t.releasing
	t.mu.Unlock()
	if releasing {
		t.releaseAt(now.Add(hold))
	}
}

// Leave tells the shadow the request was really served for service. Unless
// admit scheduled it, its shadow permit is returned that long after the
// shadow admitted it, at the shadow's concurrency.
func (t *Ticket) Leave(service time.Duration) {
	s := t.s
	s.inFlight.Add(-1)
	c := s.capacityNow()
	s.learn(s.shadowService(service, t.upstreamHeld, 0, c))
	t.mu.Lock()
	t.done, t.service = true, service
	release := t.held && !t.releasing
	t.releasing = t.releasing || release
	admittedAt, atOnce := t.admittedAt, t.atOnce
	t.mu.Unlock()
	if release {
		// Held in the shadow but not yet scheduled; not held, it is still
		// waiting there (admit schedules it) or was rejected.
		t.releaseAt(admittedAt.Add(s.shadowService(service, t.upstreamHeld, atOnce, c)))
	}
}

// capacityNow is SetCapacity's last value.
func (s *Shadow) capacityNow() float64 {
	return math.Float64frombits(s.capacity.Load())
}

// shadowService is how long a request really served for service, which
// found held requests at the upstream, would have taken with atOnce (0:
// at most the capacity) at the upstream instead, given its capacity c
// (unknown at 0). Beyond its capacity the upstream serves c at once and
// the rest wait inside it, each in turn: a request that found held took
// held/c of the time it would have taken with c, and with atOnce above c
// it would have taken atOnce/c of it.
func (s *Shadow) shadowService(service time.Duration, held, atOnce int64, c float64) time.Duration {
	if c <= 0 || float64(held) <= c {
		return service
	}
	return time.Duration(float64(service) * min(1, max(c, float64(atOnce))/float64(held)))
}

// atCapacityMemory is how many answers the moving mean of service times
// at capacity remembers, about: a fraction of a second's at a load that
// fills a pool.
const atCapacityMemory = 64

// learn adds an answer's service time at the upstream's capacity to the
// moving mean.
func (s *Shadow) learn(d time.Duration) {
	s.mu.Lock()
	if s.atCapacity == 0 {
		s.atCapacity = d
	} else {
		s.atCapacity += (d - s.atCapacity) / atCapacityMemory
	}
	s.mu.Unlock()
}

// serviceAtCapacity is the moving mean of the answers' service times at
// the upstream's capacity, 0 before the first.
func (s *Shadow) serviceAtCapacity() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.atCapacity
}

// releaseAt returns the shadow permit at due, held since the shadow
// admitted the ticket.
func (t *Ticket) releaseAt(due time.Time) {
	t.mu.Lock()
	t.req.Service = due.Sub(t.admittedAt)
	t.mu.Unlock()
	d := time.Until(due)
	if d <= 0 {
		t.s.lim.Leave(time.Now(), &t.req, t.req.Bytes)
		return
	}
	t.s.wg.Add(1)
	time.AfterFunc(d, func() {
		defer t.s.wg.Done()
		t.s.lim.Leave(time.Now(), &t.req, t.req.Bytes)
	})
}

// Close ends the shadow's waits, uncounted, and waits for its goroutines
// and timers.
func (s *Shadow) Close() {
	s.cancel()
	s.wg.Wait()
}
