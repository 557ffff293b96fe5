package limiter

import (
	"context"
	"sync"
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
}

// Shadow runs a Limiter beside traffic that it does not hold back: a dry
// run. Each request arrives at the shadow as it arrives for real, is
// admitted, queued or rejected there as the policy says, and once admitted
// holds its shadow permit for as long as it was really served, from the
// moment the shadow admitted it. So the shadow's queue grows and drains as
// the real one would have, on the real arrivals and service times; what
// it cannot know is how the upstream would have answered a lighter load,
// so service times are those of the load it really got.
type Shadow struct {
	lim    *Limiter
	report func(Decision)

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

// Limiter is the shadow's limiter, for its Stats and, in Adaptive mode,
// its controller.
func (s *Shadow) Limiter() *Limiter { return s.lim }

// Ticket is one request's place in the shadow.
type Ticket struct {
	s       *Shadow
	bytes   int64
	arrived time.Time

	mu sync.Mutex
	// admittedAt is when the shadow admitted it; zero while it waits or
	// when it was rejected.
	admittedAt time.Time
	// service is the real service time, set by Leave; done says it is.
	service time.Duration
	done    bool
	// held is set while the ticket holds a shadow permit.
	held bool
}

// Arrive puts a request that will hold bytes into the shadow, now.
func (s *Shadow) Arrive(bytes int64) *Ticket {
	t := &Ticket{s: s, bytes: bytes, arrived: time.Now()}
	switch err := s.lim.TryAcquire(bytes); err {
	case nil:
		t.admittedAt, t.held = t.arrived, true
		s.report(Decision{Would: WouldAdmit})
	case ErrMustWait:
		// A wait needs a goroutine: Acquire blocks. It is the shadow's
		// own, so the real request goes on at once.
		s.wg.Go(func() { t.wait() })
	default:
		s.report(Decision{Would: WouldReject, Err: err})
	}
	return t
}

func (t *Ticket) wait() {
	err := t.s.lim.Acquire(t.s.ctx, t.bytes)
	now := time.Now()
	wait := now.Sub(t.arrived)
	if err != nil {
		if t.s.ctx.Err() == nil {
			t.s.report(Decision{Would: WouldReject, Wait: wait, Err: err})
		}
		return
	}
	t.s.report(Decision{Would: WouldQueue, Wait: wait})
	t.mu.Lock()
	t.admittedAt, t.held = now, true
	done, service := t.done, t.service
	t.mu.Unlock()
	if done {
		// Really served already: in the shadow it is served now, for as
		// long.
		t.releaseAfter(service)
	}
}

// Leave tells the shadow the request was really served for service; its
// shadow permit is returned that long after the shadow admitted it.
func (t *Ticket) Leave(service time.Duration) {
	t.mu.Lock()
	t.done, t.service = true, service
	held, admittedAt := t.held, t.admittedAt
	t.mu.Unlock()
	if !held {
		// Still waiting in the shadow (wait releases it once admitted),
		// or rejected there.
		return
	}
	t.releaseAfter(time.Until(admittedAt.Add(service)))
}

// releaseAfter returns the shadow permit after d.
func (t *Ticket) releaseAfter(d time.Duration) {
	if d <= 0 {
		t.s.lim.Release(t.bytes)
		return
	}
	t.s.wg.Add(1)
	time.AfterFunc(d, func() {
		defer t.s.wg.Done()
		t.s.lim.Release(t.bytes)
	})
}

// Close ends the shadow's waits, uncounted, and waits for its goroutines
// and timers.
func (s *Shadow) Close() {
	s.cancel()
	s.wg.Wait()
}
