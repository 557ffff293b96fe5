package limiter

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/loomgate/loomgate/field"
)

// Rejections. Callers branch on them with errors.Is to choose the response.
var (
	// ErrQueueFull: every worker was busy and QueueSize requests were
	// already waiting.
	ErrQueueFull = errors.New("limiter: queue full")
	// ErrQueueTimeout: the request waited QueueTimeout without a worker.
	ErrQueueTimeout = errors.New("limiter: queue timeout")
	// ErrBulkheadFull: the bulkhead stayed full for BulkheadWait.
	ErrBulkheadFull = errors.New("limiter: bulkhead full")
	// ErrMemoryFull: the request's bytes do not fit in MaxInFlightBytes
	// beside those already reserved.
	ErrMemoryFull = errors.New("limiter: in-flight memory full")
	// ErrTooLarge: the request's bytes are more than MaxInFlightBytes
	// itself, so that no wait and no retry would admit it. It wraps
	// ErrMemoryFull, which it is a case of: errors.Is(err, ErrMemoryFull)
	// holds for it too.
	ErrTooLarge = fmt.Errorf("limiter: request larger than the whole in-flight memory: %w", ErrMemoryFull)
)

// ErrMustWait is TryAcquire's answer when the request could be admitted
// only after a wait: nothing is reserved, and Acquire is the way to wait.
var ErrMustWait = errors.New("limiter: must wait")

// Mode selects the admission policy.
type Mode int

const (
	// Fixed admits at most Workers requests at once and queues the rest.
	Fixed Mode = iota + 1
	// Unbounded admits every request, or at most Bulkhead at once.
	Unbounded
	// Adaptive admits every request until SetLimit sets a limit, then at
	// most that many at once, queueing the rest as Fixed does (QueueSize,
	// QueueTimeout, QueuePolicy). A controller outside the limiter moves
	// the limit; SetLimit(0) lifts it.
	Adaptive
)

// String returns the mode's name as the configuration writes it.
func (m Mode) String() string {
	switch m {
	case Fixed:
		return "fixed"
	case Unbounded:
		return "unbounded"
	case Adaptive:
		return "adaptive"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// UnmarshalText reads a mode as String writes it, so that a configuration
// parser can fill a Mode field.
func (m *Mode) UnmarshalText(text []byte) error {
	switch string(text) {
	case "fixed":
		*m = Fixed
	case "unbounded":
		*m = Unbounded
	case "adaptive":
		*m = Adaptive
	default:
		return errors.New("unknown mode")
	}
	return nil
}

// MarshalText writes the mode as String does.
func (m Mode) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// QueuePolicy orders and bounds the queue of the Fixed and Adaptive modes.
type QueuePolicy int

const (
	// FIFO admits waiters in arrival order, each after at most
	// QueueTimeout. Under sustained overload every admitted request has
	// waited about as long as the queue is deep: the whole queue's time.
	FIFO QueuePolicy = iota
	// CoDel holds queue time near QueueTarget under sustained overload:
	// once the queue has not been empty for QueueInterval, waiters that
	// have waited QueueTarget are rejected, and the newest waiter is
	// admitted first (adaptive LIFO), so that the requests served are the
	// ones whose clients still wait for them. A burst shorter than the
	// interval queues as with FIFO. This is the controlled-delay queue of
	// Facebook's servers ("Fail at Scale", 2015: target 5 ms, interval
	// 100 ms).
	CoDel
)

// String returns the policy's name as the configuration writes it.
func (q QueuePolicy) String() string {
	switch q {
	case FIFO:
		return "fifo"
	case CoDel:
		return "codel"
	}
	return fmt.Sprintf("QueuePolicy(%d)", int(q))
}

// UnmarshalText reads a policy as String writes it.
func (q *QueuePolicy) UnmarshalText(text []byte) error {
	switch string(text) {
	case "fifo":
		*q = FIFO
	case "codel":
		*q = CoDel
	default:
		return errors.New("unknown queue policy")
	}
	return nil
}

// MarshalText writes the policy as String does.
func (q QueuePolicy) MarshalText() ([]byte, error) { return []byte(q.String()), nil }

// Config describes a Limiter. It may carry every mode's settings, so that
// one configuration serves any mode: every field is validated, and only
// the fields of Mode are in force.
type Config struct {
	// Mode is Fixed, Unbounded or Adaptive; the zero value is invalid.
	Mode Mode

	// Workers is, in Fixed mode, the most requests admitted at once. It must
	// be at least 1 in Fixed mode; in Unbounded mode, 0 or more.
	Workers int
	// QueueSize is, in Fixed and Adaptive mode, the most requests waiting
	// for a permit.
	// A request that would be one more is rejected with ErrQueueFull. If
	// zero, a request that finds every worker busy is rejected at once.
	QueueSize int
	// QueueTimeout is, in Fixed and Adaptive mode, the longest a request
	// waits for a permit before ErrQueueTimeout. It must be above zero when
	// QueueSize is and Mode is not Unbounded.
	QueueTimeout time.Duration
	// QueuePolicy is, in Fixed and Adaptive mode, how waiters are ordered
	// and how long they may wait under overload. If zero, FIFO.
	QueuePolicy QueuePolicy
	// QueueTarget is, with CoDel, the longest wait once the queue has
	// stood for QueueInterval. It must be above zero and below
	// QueueTimeout with CoDel.
	QueueTarget time.Duration
	// QueueInterval is, with CoDel, how long the queue must stay non-empty
	// before QueueTarget applies. It must be above zero with CoDel.
	QueueInterval time.Duration

	// Bulkhead is, in Unbounded mode, the most requests admitted at once.
	// If zero, every request is admitted.
	Bulkhead int
	// BulkheadWait is, in Unbounded mode, the longest a request waits for a
	// place in the bulkhead before ErrBulkheadFull. If zero, a request that
	// finds the bulkhead full is rejected at once. It must be zero when
	// Bulkhead is.
	BulkheadWait time.Duration

	// Ceiling is, in Adaptive mode, the most requests admitted at once
	// whatever SetLimit sets, 0 (none) included: a bound on what the
	// controller may allow, in force before its first limit too. If zero,
	// none.
	Ceiling int

	// MaxInFlightBytes caps the bytes reserved by admitted and waiting
	// requests together; a request whose bytes do not fit is rejected at
	// once with ErrMemoryFull. If zero, bytes are counted but not capped.
	MaxInFlightBytes int64

	// Probe allows SetProbe, in every mode. If false, SetProbe panics, and
	// Unbounded mode without a bulkhead admits without taking a lock that
	// every request shares.
	Probe bool

	// Priorities orders the waiters by their request's Level, and fairly
	// between its flows within a level (see lanes), in place of one FIFO
	// list: a freed permit goes to the highest level waiting, and a full
	// queue sheds the lowest first. If false, every request is Default
	// and the queue is FIFO (or codel's), as it always was.
	Priorities bool
	// Shares is each level's guaranteed share of the limit in force, in
	// percent: a level below its share is served first, and its share
	// is held for it while it has a request in flight or waiting, lent to
	// the others only while it has none (see lanes.mayTake). They add up
	// to 100 at most; they need Priorities.
	Shares [NumLevels]int
}

// Validate reports every problem of cfg as *field.Error values joined,
// or nil.
func (cfg Config) Validate() error {
	var problems []error
	bad := func(name, format string, args ...any) {
		problems = append(problems, &field.Error{Part: "limiter", Field: name, Problem: fmt.Sprintf(format, args...)})
	}
	switch cfg.Mode {
	case Fixed, Unbounded, Adaptive:
	default:
		bad("Mode", "is %v; want Fixed, Unbounded or Adaptive", cfg.Mode)
	}
	if cfg.Workers < 0 || cfg.Mode == Fixed && cfg.Workers < 1 {
		bad("Workers", "is %d; want at least 1", cfg.Workers)
	}
	if cfg.QueueSize < 0 {
		bad("QueueSize", "is %d; want 0 or more", cfg.QueueSize)
	}
	if cfg.QueueTimeout < 0 {
		bad("QueueTimeout", "is %v; want above 0", cfg.QueueTimeout)
	} else if cfg.Mode != Unbounded && cfg.QueueSize > 0 && cfg.QueueTimeout == 0 {
		bad("QueueTimeout", "is %v; want above 0 when QueueSize is above 0", cfg.QueueTimeout)
	}
	if cfg.Bulkhead < 0 {
		bad("Bulkhead", "is %d; want 0 or more", cfg.Bulkhead)
	}
	if cfg.Ceiling < 0 {
		bad("Ceiling", "is %d; want 0 or more", cfg.Ceiling)
	}
	if cfg.BulkheadWait < 0 {
		bad("BulkheadWait", "is %v; want 0 or more", cfg.BulkheadWait)
	} else if cfg.BulkheadWait > 0 && cfg.Bulkhead == 0 {
		bad("BulkheadWait", "is %v; has no effect unless Bulkhead is above 0", cfg.BulkheadWait)
	}
	if cfg.MaxInFlightBytes < 0 {
		bad("MaxInFlightBytes", "is %d; want 0 or more", cfg.MaxInFlightBytes)
	}
	switch cfg.QueuePolicy {
	case FIFO:
	case CoDel:
		if cfg.QueueTarget <= 0 {
			bad("QueueTarget", "is %v; want above 0 with the codel queue policy", cfg.QueueTarget)
		} else if cfg.QueueTimeout > 0 && cfg.QueueTarget >= cfg.QueueTimeout {
			bad("QueueTarget", "is %v; want below QueueTimeout (%v)", cfg.QueueTarget, cfg.QueueTimeout)
		}
		if cfg.QueueInterval <= 0 {
			bad("QueueInterval", "is %v; want above 0 with the codel queue policy", cfg.QueueInterval)
		}
	default:
		bad("QueuePolicy", "is %v; want FIFO or CoDel", cfg.QueuePolicy)
	}
	if cfg.QueueTarget < 0 {
		bad("QueueTarget", "is %v; want 0 or more", cfg.QueueTarget)
	}
	if cfg.QueueInterval < 0 {
		bad("QueueInterval", "is %v; want 0 or more", cfg.QueueInterval)
	}
	total := 0
	for l, pct := range cfg.Shares {
		if pct < 0 || pct > 100 {
			bad("Shares", "gives %s %d%%; want 0 to 100", Level(l), pct)
		}
		total += pct
	}
	switch {
	case total > 100:
		bad("Shares", "add up to %d%%; want 100 at most", total)
	case total > 0 && !cfg.Priorities:
		bad("Shares", "are set without Priorities")
	}
	return errors.Join(problems...)
}

// Limiter admits requests according to its Config. It is safe for
// concurrent use.
//
// Waiting requests stand in one FIFO list, and one timer serves them all:
// every waiter waits the same time and joins at the tail, so deadlines rise
// from head to tail and only the head's needs a timer. A waiting request
// costs the Limiter a small pooled record and nothing else: no goroutine,
// no timer, no context of its own.
type Limiter struct {
	mode  Mode
	queue int // most waiters; -1 when bounded by time only
	// ceiling is Config.Ceiling: in Adaptive mode, the limit SetLimit
	// sets is at most this, and none (0) is this.
	ceiling int
	wait    time.Duration
	// errFull and errTimeout are what a rejection returns in this mode, so
	// the hot path does not branch on the mode.
	errFull, errTimeout error
	memSize             int64 // MaxInFlightBytes; 0: bytes not capped

	// codel is set with the CoDel queue policy in Fixed or Adaptive mode,
	// when requests may wait: target and interval are its QueueTarget and
	// QueueInterval.
	codel            bool
	target, interval time.Duration

	mu sync.Mutex
	// closed is set by RejectWaiting: no request waits any more.
	closed bool
	// limit is the most permits held at once; 0 admits everyone (Adaptive
	// before SetLimit). limitNow mirrors it for Stats.
	limit    int
	limitNow atomic.Int64
	used     int // permits held; below limit only while nobody waits
	// emptySince is when the queue last stopped being empty (its first
	// waiter's arrival): with codel, a queue that has not been empty for
	// interval is a standing queue, the sign of overload.
	emptySince time.Time
	// overloadUntil is, with codel, when overload ends unless another
	// request has to wait before: every request that queues while
	// overloaded extends it by interval. Without it the queue would empty
	// for an instant under LIFO and rejections, and each such instant
	// would start another interval of FIFO and long waits.
	overloadUntil time.Time
	head          *waiter
	tail          *waiter
	waiting       int
	timer         *time.Timer // fires at the head's deadline; nil until first needed
	armed         bool        // timer is set to fire
	timerAt       time.Time   // when it fires, while armed
	// free holds waiters for reuse, linked by next. A Limiter's own list
	// rather than a sync.Pool: a waiter's channel may only be used where
	// it was made (a synctest bubble is one such place).
	free  *waiter
	nfree int
	// since is when waiting last changed, and waitingSecs and waitingNanos
	// hold its time-integral up to it (RequestSeconds): whole
	// request-seconds plus nanoseconds under one second, so that neither
	// overflows nor loses precision however long the process lives.
	since                     time.Time
	waitingSecs, waitingNanos int64
	// held is the time-integral of the permits held. It has locks of its
	// own, so that pass-through admits without taking mu.
	held *integral
	// passThrough is set for Unbounded mode without a bulkhead, whose
	// limit never changes from 0: nothing waits, used is not kept, and
	// admission and release take no lock shared by every request. Not
	// with priorities, whose lanes count what each level holds.
	passThrough bool
	// probeable is Config.Probe; probe is the cap SetProbe set, 0 for
	// none. probeNow mirrors it for Stats.
	probeable bool
	probe     int
	probeNow  atomic.Int64
	// lanes order the waiters by level and flow with Config.Priorities;
	// nil without, and the list alone is the order. sharePct is
	// Config.Shares, turned into permits as the limit in force changes.
	lanes    *lanes
	sharePct [NumLevels]int

	inFlight, queued, bytes             atomic.Int64
	inFlightPeak, queuedPeak, bytesPeak atomic.Int64
}

// waiter is one request in the queue. Its fields belong to the Limiter's
// mutex, except ready, which is how its decision reaches it.
type waiter struct {
	prev, next *waiter
	// enqueued is when the waiter joined; its deadline is enqueued plus
	// the wait in force (see timeout), which is the same for every waiter
	// at any moment, so deadlines rise from head to tail.
	enqueued time.Time
	// ready receives one value when the waiter is decided: admitted (err
	// nil) or timed out. Buffered, so that the decider never blocks.
	ready  chan struct{}
	err    error
	queued bool
	// With priorities, the waiter's place in the lanes: its level, its
	// queue there, and its neighbours in that queue.
	level        Level
	flow         uint64
	lane         uint8
	lprev, lnext *waiter
	// charged is what its queue was charged for its turn (lanes.took).
	charged time.Duration
}

// maxFree bounds the waiters kept for reuse: enough for the queue of a
// busy minute to cost no allocation, while a burst of ten thousand leaves
// little behind.
const maxFree = 1024

// New validates cfg and returns a Limiter.
func New(cfg Config) (*Limiter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	l := &Limiter{mode: cfg.Mode, memSize: cfg.MaxInFlightBytes}
	switch cfg.Mode {
	case Fixed:
		l.limit, l.queue, l.wait = cfg.Workers, cfg.QueueSize, cfg.QueueTimeout
		if cfg.QueueSize == 0 {
			l.wait = 0
		}
		l.errFull, l.errTimeout = ErrQueueFull, ErrQueueTimeout
	case Unbounded:
		l.limit, l.queue, l.wait = cfg.Bulkhead, -1, cfg.BulkheadWait
		l.errFull, l.errTimeout = ErrBulkheadFull, ErrBulkheadFull
	case Adaptive:
		l.ceiling = cfg.Ceiling
		l.limit, l.queue, l.wait = l.ceiling, cfg.QueueSize, cfg.QueueTimeout
		if cfg.QueueSize == 0 {
			l.wait = 0
		}
		l.errFull, l.errTimeout = ErrQueueFull, ErrQueueTimeout
	}
	if cfg.Mode != Unbounded && cfg.QueuePolicy == CoDel && l.wait > 0 {
		l.codel, l.target, l.interval = true, cfg.QueueTarget, cfg.QueueInterval
	}
	l.limitNow.Store(int64(l.limit))
	l.probeable = cfg.Probe
	if cfg.Priorities {
		l.lanes, l.sharePct = new(lanes), cfg.Shares
		l.sharesLocked()
	}
	l.passThrough = cfg.Mode == Unbounded && l.limit == 0 && !cfg.Probe && !cfg.Priorities
	l.since = time.Now()
	l.held = newIntegral(l.since)
	return l, nil
}

// TryAcquire admits one request that will hold the given bytes if it can
// be admitted at once. It returns nil (then the caller must call
// Release(bytes) exactly once), a rejection of this package, or ErrMustWait
// when only a wait could admit it; then nothing is held, and Acquire waits.
//
// It is the fast path of Acquire for callers that make the context of a
// wait only when there is one: it takes no context, no timer and allocates
// nothing.
func (l *Limiter) TryAcquire(bytes int64) error {
	return l.TryAcquireAt(time.Now(), bytes)
}

// TryAcquireAt is TryAcquire for a caller that has read the clock already:
// now, a reading taken for this request a moment ago, is when a request
// admitted begins to hold its permit. A clock reading costs as much as the
// rest of an admission in pass-through.
func (l *Limiter) TryAcquireAt(now time.Time, bytes int64) error {
	return l.tryAcquire(now, bytes, Default)
}

func (l *Limiter) tryAcquire(now time.Time, bytes int64, level Level) error {
	if err := l.reserveBytes(bytes); err != nil {
		return err
	}
	if l.passThrough {
		l.held.add(now, 1)
		l.countAdmitted()
		return nil
	}
	l.mu.Lock()
	admitted, full := l.admitLocked(now, level)
	l.mu.Unlock()
	switch {
	case admitted:
		l.countAdmitted()
		return nil
	case full:
		l.releaseBytes(bytes)
		return l.errFull
	}
	l.releaseBytes(bytes)
	return ErrMustWait
}

// Admit is TryAcquireAt for the Policy, for a request of r.Level: with
// Config.Priorities, a full queue may shed one of a lower level for it
// (ErrMustWait then, and Wait sheds it as it queues).
func (l *Limiter) Admit(now time.Time, r *Request) error {
	return l.tryAcquire(now, r.Bytes, r.Level)
}

// Wait is Acquire for the Policy, for a request of r.Level in r.Flow (0
// for none): with Config.Priorities it waits in its level's lanes, its
// flow served fairly with the level's others.
func (l *Limiter) Wait(ctx context.Context, r *Request) error {
	return l.acquire(ctx, r.Bytes, r.Level, r.Flow, r)
}

// Leave is ReleaseAt for the Policy. With priorities, a request admitted
// from the lanes settles its turn's charge against r.Service.
func (l *Limiter) Leave(now time.Time, r *Request, bytes int64) {
	l.releaseAt(now, bytes, r.Level, r)
}

// admitLocked takes a permit if one is free and reports whether it did,
// and otherwise whether a wait is out of the question: no waiting in this
// mode, or the queue at its bound. The caller holds l.mu.
func (l *Limiter) admitLocked(now time.Time, level Level) (admitted, full bool) {
	if c := l.capLocked(); (l.used < c || c == 0) && (l.lanes == nil || c == 0 || l.lanes.mayTake(level, c-l.used, now)) {
		l.held.add(now, 1)
		l.used++
		if l.lanes != nil {
			l.lanes.held[level]++
		}
		return true, false
	}
	full = l.fullLocked()
	if full && l.wait > 0 && l.lanes != nil && l.lanes.shed(level) != nil {
		// A full queue makes room for a higher level by shedding a lower
		// one's newest (acquire does, as it queues).
		full = false
	}
	return false, full
}

// fullLocked reports whether a request that cannot be admitted at once
// cannot wait either: no waiting in this mode, or the queue at its bound.
// The caller holds l.mu.
func (l *Limiter) fullLocked() bool {
	if l.probe > 0 && l.wait <= 0 {
		// A mode with no queue of its own (unbounded, its bulkhead
		// failing fast, or none) has no bound for a probe's waiters to
		// keep: held back by a probe, a request waits as it would have
		// without it, and one that would have been admitted waits.
		return l.limit > 0 && l.used+l.waiting >= l.limit
	}
	// A mode with a queue keeps its bound whatever holds admission back,
	// a probe's cap as its own limit: overload first. Under open arrivals
	// a probe that suspended it grew the queue by the second.
	return l.wait <= 0 || l.queue >= 0 && l.waiting >= l.queue
}

// capLocked is the most permits held at once now: the mode's limit, or a
// probe's cap below it; 0 for none. The caller holds l.mu.
func (l *Limiter) capLocked() int {
	if l.probe > 0 && (l.limit == 0 || l.probe < l.limit) {
		return l.probe
	}
	return l.limit
}

// countAdmitted counts a request admitted at once.
func (l *Limiter) countAdmitted() { peak(&l.inFlightPeak, l.inFlight.Add(1)) }

// Acquire admits one request that will hold the given bytes, waiting as the
// mode allows. It returns nil, or one of the Err values of this package, or
// ctx.Err() when ctx ends first (the client left). On nil the caller must
// call Release(bytes) exactly once.
func (l *Limiter) Acquire(ctx context.Context, bytes int64) error {
	return l.acquire(ctx, bytes, Default, 0, nil)
}

// acquire admits a request of bytes, level and flow, at once or after a
// wait; r, if not nil, learns what its queue was charged for its turn.
func (l *Limiter) acquire(ctx context.Context, bytes int64, level Level, flow uint64, r *Request) error {
	if err := l.reserveBytes(bytes); err != nil {
		return err
	}
	if l.passThrough {
		l.held.add(time.Now(), 1)
		l.countAdmitted()
		return nil
	}
	l.mu.Lock()
	switch admitted, full := l.admitLocked(time.Now(), level); {
	case admitted:
		l.mu.Unlock()
		l.countAdmitted()
		return nil
	case full:
		l.mu.Unlock()
		l.releaseBytes(bytes)
		return l.errFull
	}
	if err := ctx.Err(); err != nil {
		// Gone before it queued: never counted as waiting.
		l.mu.Unlock()
		l.releaseBytes(bytes)
		return err
	}
	if l.closed {
		// The queue's time is up (RejectWaiting): no wait would end in
		// an admission.
		l.mu.Unlock()
		l.releaseBytes(bytes)
		return l.errTimeout
	}
	w := l.free
	if w != nil {
		l.free, l.nfree = w.next, l.nfree-1
	} else {
		w = &waiter{ready: make(chan struct{}, 1)}
	}
	w.enqueued = time.Now()
	if l.lanes != nil && l.fullLocked() {
		// Full, and admitLocked found a lower level to shed for it.
		l.advance(w.enqueued)
		l.decide(l.lanes.shed(level), l.errFull)
	}
	w.level, w.flow = level, flow
	l.push(w)
	l.mu.Unlock()

	err := l.await(ctx, w)
	l.mu.Lock()
	if err == nil && r != nil && l.lanes != nil {
		r.lane, r.laned, r.charged = w.lane, true, w.charged
	}
	if l.nfree < maxFree {
		w.next, l.free = l.free, w
		l.nfree++
	}
	l.mu.Unlock()
	if err != nil {
		l.releaseBytes(bytes)
	}
	return err
}

// await blocks until w is decided or ctx ends, and returns the result.
func (l *Limiter) await(ctx context.Context, w *waiter) error {
	select {
	case <-w.ready:
		return w.err
	case <-ctx.Done():
	}
	l.mu.Lock()
	if w.queued {
		l.advance(time.Now())
		l.unlink(w)
		l.queued.Add(-1)
		l.mu.Unlock()
		return ctx.Err()
	}
	// Decided while ctx ended: the decision is waiting in ready.
	l.mu.Unlock()
	<-w.ready
	if w.err == nil {
		// Admitted, but nobody is left to serve: the permit goes on to
		// the next waiter, and its queue gets back its turn's charge.
		gone := Request{lane: w.lane, laned: l.lanes != nil, charged: w.charged}
		l.releaseAt(time.Now(), 0, w.level, &gone)
	}
	// Both may be done at once; the client leaving is the truer story and
	// keeps a disconnect from counting as a timeout.
	return ctx.Err()
}

// push appends w to the queue and makes sure the timer will fire for the
// head. The caller holds l.mu.
func (l *Limiter) push(w *waiter) {
	w.queued, w.err, w.next = true, nil, nil
	if l.lanes != nil {
		l.lanes.push(w, w.level, w.flow)
	}
	w.prev = l.tail
	if l.tail != nil {
		l.tail.next = w
	} else {
		l.head = w
	}
	l.tail = w
	l.advance(w.enqueued)
	// Judged before this waiter counts: it had to queue, so an overload
	// that holds goes on for another interval.
	l.noteOverload(w.enqueued)
	if l.waiting == 0 {
		l.emptySince = w.enqueued
	}
	l.waiting++
	peak(&l.queuedPeak, l.queued.Add(1))
	// With FIFO the timer, once armed, is never late: it was set for an
	// older waiter's deadline. With codel the wait in force can shrink
	// (overload begins), so a check due sooner than the timer re-arms it.
	if at := l.nextCheck(w.enqueued); !l.armed || at.Before(l.timerAt) {
		l.arm(w.enqueued, at)
	}
}

// arm sets the timer to fire at at. The caller holds l.mu.
func (l *Limiter) arm(now, at time.Time) {
	l.armed, l.timerAt = true, at
	if l.timer == nil {
		l.timer = time.AfterFunc(at.Sub(now), l.expire)
	} else {
		l.timer.Reset(at.Sub(now))
	}
}

// noteOverload extends codel's overload by an interval from now if it
// holds now. The caller holds l.mu.
func (l *Limiter) noteOverload(now time.Time) {
	if l.overloaded(now) {
		l.overloadUntil = now.Add(l.interval)
	}
}

// overloaded reports whether codel's overload holds at now: the queue has
// not been empty for a whole interval (a standing queue, not a burst), or
// it did and requests have kept queueing since. The caller holds l.mu.
func (l *Limiter) overloaded(now time.Time) bool {
	return l.codel && (now.Before(l.overloadUntil) || l.waiting > 0 && now.Sub(l.emptySince) >= l.interval)
}

// timeout is the longest wait in force at now: QueueTarget while the
// queue stands, the mode's wait otherwise. The caller holds l.mu.
func (l *Limiter) timeout(now time.Time) time.Duration {
	if l.probe > 0 && l.wait <= 0 {
		// A mode with no queue of its own: a probe's waiters wait until
		// it ends, which its controller bounds well within probeWait.
		return probeWait
	}
	if l.overloaded(now) {
		return l.target
	}
	return l.wait
}

// probeWait is the longest a request waits while a probe caps admission
// in a mode with no queue of its own, a bound the probe never reaches: it
// lifts its cap within seconds.
const probeWait = time.Minute

// nextCheck is when the queue must next be looked at: the head's deadline,
// or, with codel and no standing queue yet, the moment it would begin to
// stand, when the head's deadline shortens. The caller holds l.mu, and the
// queue is not empty.
func (l *Limiter) nextCheck(now time.Time) time.Time {
	at := l.head.enqueued.Add(l.timeout(now))
	if l.codel && !l.overloaded(now) {
		if stands := l.emptySince.Add(l.interval); stands.Before(at) {
			at = stands
		}
	}
	// Never in the past: a check due now runs now.
	if at.Before(now) {
		return now
	}
	return at
}

// unlink removes w from the queue. The caller holds l.mu.
func (l *Limiter) unlink(w *waiter) {
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		l.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		l.tail = w.prev
	}
	w.prev, w.next, w.queued = nil, nil, false
	l.waiting--
	if l.lanes != nil {
		l.lanes.remove(w)
	}
}

// decide takes w off the queue with err (nil: admitted) and wakes it. The
// caller holds l.mu, and has counted an admission in flight.
func (l *Limiter) decide(w *waiter, err error) {
	l.unlink(w)
	w.err = err
	l.queued.Add(-1)
	w.ready <- struct{}{}
}

// next is the waiter a freed permit goes to: the oldest, or with codel
// under a standing queue the newest, whose client is the likeliest still
// to wait for its answer. The caller holds l.mu; the queue is not empty.
func (l *Limiter) next() *waiter {
	newest := l.codel && l.overloaded(time.Now())
	switch {
	case l.lanes != nil:
		return l.lanes.next(newest)
	case newest:
		return l.tail
	}
	return l.head
}

// expire rejects the waiters whose deadline has passed, from the head, and
// sets the timer for the next. A head that was admitted before its
// deadline leaves the timer early for its successor: it fires, finds
// nothing due, and is set again, once per deadline at most.
func (l *Limiter) expire() {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	l.advance(now)
	// The wait in force is read once: rejecting the head may empty the
	// queue, and must not make the rest's wait longer mid-loop. A queue
	// found standing here starts the overload, which then outlasts the
	// instants the queue empties.
	l.noteOverload(now)
	wait := l.timeout(now)
	for l.head != nil && !l.head.enqueued.Add(wait).After(now) {
		l.decide(l.head, l.errTimeout)
	}
	if l.head == nil {
		l.armed = false
		return
	}
	l.arm(now, l.nextCheck(now))
}

// RejectWaiting rejects every request waiting for admission, as at its
// timeout, and from now on every request that would have to wait: for a
// drain whose time is up, when the process is about to stop and a wait
// could only end in a closed connection. Admissions at once go on.
func (l *Limiter) RejectWaiting() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	l.advance(time.Now())
	for l.head != nil {
		l.decide(l.head, l.errTimeout)
	}
}

// Release returns the permit and bytes of one admitted request. The permit
// goes straight to the oldest waiter, if any, so that a newcomer can never
// take it first.
func (l *Limiter) Release(bytes int64) {
	l.ReleaseAt(time.Now(), bytes)
}

// ReleaseAt is Release for a caller that has read the clock already: now,
// a reading taken a moment ago, is when the permit stops being held.
func (l *Limiter) ReleaseAt(now time.Time, bytes int64) {
	l.releaseAt(now, bytes, Default, nil)
}

// releaseAt returns a permit of level and bytes at now; r, if not nil, is
// the request that held it, whose turn's charge is settled.
func (l *Limiter) releaseAt(now time.Time, bytes int64, level Level, r *Request) {
	if l.inFlight.Add(-1) < 0 {
		panic("limiter: released more than acquired")
	}
	if l.passThrough {
		l.held.add(now, -1)
		l.releaseBytes(bytes)
		return
	}
	l.mu.Lock()
	if l.lanes != nil {
		// With priorities, the permit is freed, then given to the
		// waiters the lanes and the shares allow: one a level's share
		// holds for it while it is active may stay free for it.
		l.held.add(now, -1)
		l.used--
		l.lanes.held[level]--
		l.lanes.released[level] = now
		if r != nil && r.laned {
			l.lanes.settle(level, r.lane, r.charged, r.Service)
			r.laned = false
		}
		l.admitWaiting(now)
		l.mu.Unlock()
		l.releaseBytes(bytes)
		return
	}
	// A permit goes on to a waiter only while the limit allows it: a
	// lowered limit is reached by releases that hand nothing on.
	if c := l.capLocked(); l.head != nil && (c == 0 || l.used <= c) {
		// The permit changes hands at one instant: what is held does not
		// change, what waits does.
		l.advance(now)
		// In flight rises before queued falls, so that a reader
		// summing the two never sees the request vanish.
		peak(&l.inFlightPeak, l.inFlight.Add(1))
		l.decide(l.next(), nil)
	} else {
		l.held.add(now, -1)
		l.used--
	}
	l.mu.Unlock()
	l.releaseBytes(bytes)
}

// SetLimit sets the most requests admitted at once, from now: waiters are
// admitted at once if the new limit allows, and a lower limit is reached
// as admitted requests finish (none is cut short). Zero admits everyone,
// up to Config.Ceiling, which also bounds any other limit. It is for
// Adaptive mode, whose controller calls it; it panics in the
// other modes, whose limit is their configuration.
func (l *Limiter) SetLimit(n int) {
	if l.mode != Adaptive || n < 0 {
		panic("limiter: SetLimit outside Adaptive mode or below 0")
	}
	if c := l.ceiling; c > 0 && (n == 0 || n > c) {
		n = c
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	l.advance(now)
	l.limit = n
	l.limitNow.Store(int64(n))
	if l.lanes != nil {
		l.sharesLocked()
	}
	l.admitWaiting(now)
}

// admitWaiting admits waiters, in order, while the cap in force allows,
// after it was raised. The caller holds l.mu.
func (l *Limiter) admitWaiting(now time.Time) {
	for c := l.capLocked(); l.head != nil && (c == 0 || l.used < c); {
		w := l.next()
		if l.lanes != nil {
			if c > 0 && !l.lanes.mayTake(w.level, c-l.used, now) {
				// The free permits are held for levels whose share they
				// are, until they come for them.
				return
			}
			l.lanes.held[w.level]++
			w.charged = l.lanes.took(w)
		}
		l.held.add(now, 1)
		l.used++
		peak(&l.inFlightPeak, l.inFlight.Add(1))
		l.decide(w, nil)
	}
}

// sharesLocked turns the levels' shares into permits of the limit in
// force (none while it is none): rounded down, so that they never add up
// to more than it. The caller holds l.mu, or is New.
func (l *Limiter) sharesLocked() {
	c := l.capLocked()
	for lv, pct := range l.sharePct {
		l.lanes.share[lv] = c * pct / 100
	}
}

// SetProbe caps admission at n from now, below the mode's limit (or
// beside none), or lifts the cap with 0: a probe of the upstream, which
// admits fewer for a few seconds to read what it serves with fewer
// inside. Requests the cap holds back wait in the mode's queue, within
// its bounds (its size, its timeout, codel's target) as behind its limit:
// a probe measures, it never suspends the shedding of an overload. In a
// mode with no queue of its own (unbounded, its bulkhead failing fast or
// none) they wait, never rejected for the cap, at most probeWait. A lower
// cap is reached as admitted requests finish, none is cut short; a lifted
// cap admits the waiters the mode's limit allows at once. It panics
// unless Config.Probe was set.
func (l *Limiter) SetProbe(n int) {
	if !l.probeable || n < 0 {
		panic("limiter: SetProbe without Config.Probe or below 0")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	l.advance(now)
	l.probe = n
	l.probeNow.Store(int64(n))
	if l.lanes != nil {
		l.sharesLocked()
	}
	l.admitWaiting(now)
	// The wait in force changed with the probe: the head's deadline
	// with it.
	if l.head != nil {
		l.arm(now, l.nextCheck(now))
	}
}

// TryReserve adds bytes to what an admitted request holds, without waiting,
// and reports whether they fit in MaxInFlightBytes beside those already
// reserved. Without a memory bulkhead it only counts them and reports true.
// Bytes reserved here are returned by the request's Release, which must then
// be given the request's whole count: what Acquire took plus every
// successful TryReserve.
//
// It is how a request that learns its size late (a response, once its
// headers arrive) keeps the bulkhead's promise: the caller that is refused
// must not hold the bytes, for instance by streaming instead of buffering.
func (l *Limiter) TryReserve(bytes int64) bool {
	// Never waiting is the point: the request already holds a permit, and
	// waiting for memory while holding one is how two requests deadlock.
	return l.reserveBytes(bytes) == nil
}

// reserveBytes counts bytes, or refuses them with ErrMemoryFull when they
// do not fit beside those reserved, and with ErrTooLarge when they would
// not fit in the whole bulkhead. The memory bulkhead never waits: its
// purpose is to shed load before memory runs out, and a queue of
// reservations would hold that memory anyway.
func (l *Limiter) reserveBytes(bytes int64) error {
	if bytes < 0 {
		panic("limiter: negative bytes")
	}
	if l.memSize == 0 {
		peak(&l.bytesPeak, l.bytes.Add(bytes))
		return nil
	}
	if bytes > l.memSize {
		return ErrTooLarge
	}
	for {
		cur := l.bytes.Load()
		if cur+bytes > l.memSize {
			return ErrMemoryFull
		}
		if l.bytes.CompareAndSwap(cur, cur+bytes) {
			peak(&l.bytesPeak, cur+bytes)
			return nil
		}
	}
}

// ReleaseBytes returns bytes a request kept reserved past its permit,
// which it released with Release(0): a request that outlives its permit
// (a gRPC stream past its headers holds no worker, but still holds its
// buffers) stays within the memory bulkhead for as long as it lives.
func (l *Limiter) ReleaseBytes(bytes int64) { l.releaseBytes(bytes) }

func (l *Limiter) releaseBytes(bytes int64) {
	if l.bytes.Add(-bytes) < 0 {
		panic("limiter: released more bytes than reserved")
	}
}

// peak raises p to v if v is higher.
func peak(p *atomic.Int64, v int64) {
	for {
		old := p.Load()
		if v <= old || p.CompareAndSwap(old, v) {
			return
		}
	}
}

// Stats is a snapshot of a Limiter's state.
type Stats struct {
	Mode Mode
	// InFlight counts admitted requests not yet released.
	InFlight int64
	// Queued counts requests waiting for admission.
	Queued int64
	// Bytes counts bytes reserved by admitted and waiting requests.
	Bytes int64
	// Limit is the enforced concurrency limit, 0 when there is none.
	Limit int
	// QueueLimit is the most waiters, 0 when the queue is bounded by time
	// alone or there is none.
	QueueLimit int
	// MaxBytes is MaxInFlightBytes, 0 when bytes are not capped.
	MaxBytes int64
	// Probe is a probe's cap in force (SetProbe), 0 when there is none.
	Probe int
}

// Stats returns the current state.
func (l *Limiter) Stats() Stats {
	return Stats{
		Mode:       l.mode,
		InFlight:   l.inFlight.Load(),
		Queued:     l.queued.Load(),
		Bytes:      l.bytes.Load(),
		Limit:      int(l.limitNow.Load()),
		QueueLimit: max(l.queue, 0),
		MaxBytes:   l.memSize,
		Probe:      int(l.probeNow.Load()),
	}
}

// LevelStats is what one priority level holds and has waiting.
type LevelStats struct{ InFlight, Queued int64 }

// Levels returns each level's requests in flight and waiting, by level;
// without Config.Priorities, every request is Default's.
func (l *Limiter) Levels() [NumLevels]LevelStats {
	var out [NumLevels]LevelStats
	if l.lanes == nil {
		out[Default] = LevelStats{l.inFlight.Load(), l.queued.Load()}
		return out
	}
	l.mu.Lock()
	for lv := range out {
		out[lv] = LevelStats{int64(l.lanes.held[lv]), int64(l.lanes.level[lv].waiting)}
	}
	l.mu.Unlock()
	return out
}

// advance carries the integral of waiters up to now, at the count that held
// since the last change; the caller holds l.mu and calls it before changing
// the count. A reading taken under the lock is never before since, but
// ReleaseAt's is the caller's, taken a moment before: if it is before since,
// the change counts as made at since, microseconds late.
func (l *Limiter) advance(now time.Time) {
	d := int64(now.Sub(l.since))
	if d <= 0 {
		return
	}
	l.since = now
	l.waitingSecs, l.waitingNanos = integrate(l.waitingSecs, l.waitingNanos, int64(l.waiting), d)
}

// integrate adds n times d nanoseconds to secs and nanos, keeping nanos
// below one second. Splitting d keeps n*d from overflowing for any n below
// nine billion, however long d is.
func integrate(secs, nanos, n, d int64) (int64, int64) {
	if n == 0 {
		return secs, nanos
	}
	const second = int64(time.Second)
	secs += n * (d / second)
	nanos += n * (d % second)
	if nanos >= second {
		secs, nanos = secs+nanos/second, nanos%second
	}
	return secs, nanos
}

// RequestSeconds returns the time-integrals, since New, of the requests in
// flight and of those queued, in request-seconds: each request adds the
// time it held a permit to inFlight and the time it waited to queued, and
// those still in flight or waiting count up to the call. They are exact,
// updated at every change of either count rather than sampled, and never
// decrease; over any span, their increase divided by its length is the
// mean concurrency (or queue depth) within it, bursts included.
//
// In flight is read at one instant; a change whose clock was read just
// before it but had not yet landed is left to the next reading (see
// integral).
func (l *Limiter) RequestSeconds() (inFlight, queued float64) {
	l.mu.Lock()
	now := time.Now()
	l.advance(now)
	queued = seconds(l.waitingSecs, l.waitingNanos)
	l.mu.Unlock()
	return l.held.seconds(time.Now), queued
}

func seconds(secs, nanos int64) float64 {
	return float64(secs) + float64(nanos)/float64(time.Second)
}

// TakePeaks returns the highest in-flight, queued and reserved bytes since
// the previous call and starts the next period at the current values. Each
// call ends a period, so it must have one caller: a sampler that keeps the
// peaks for everyone who reads them (metrics does, per interval). Two
// scrapers calling it directly would each see only part of the bursts.
func (l *Limiter) TakePeaks() (inFlight, queued, bytes int64) {
	return takePeak(&l.inFlightPeak, &l.inFlight),
		takePeak(&l.queuedPeak, &l.queued),
		takePeak(&l.bytesPeak, &l.bytes)
}

// takePeak returns the peak and restarts it at the current value.
func takePeak(p, cur *atomic.Int64) int64 {
	v := p.Swap(cur.Load())
	// A rise between the Load and the Swap was overwritten; raising again
	// carries it into the next period instead of losing it.
	peak(p, cur.Load())
	return v
}
