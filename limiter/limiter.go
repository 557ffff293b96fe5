package limiter

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"
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
)

// Mode selects the admission policy.
type Mode int

const (
	// Fixed admits at most Workers requests at once and queues the rest.
	Fixed Mode = iota + 1
	// Unbounded admits every request, or at most Bulkhead at once.
	Unbounded
)

// String returns the mode's name as the configuration writes it.
func (m Mode) String() string {
	switch m {
	case Fixed:
		return "fixed"
	case Unbounded:
		return "unbounded"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Config describes a Limiter. Fields that belong to the other mode must be
// zero, so that a setting never silently does nothing.
type Config struct {
	// Mode is Fixed or Unbounded; the zero value is invalid.
	Mode Mode

	// Workers is, in Fixed mode, the most requests admitted at once. It must
	// be at least 1.
	Workers int
	// QueueSize is, in Fixed mode, the most requests waiting for a worker.
	// A request that would be one more is rejected with ErrQueueFull. If
	// zero, a request that finds every worker busy is rejected at once.
	QueueSize int
	// QueueTimeout is, in Fixed mode, the longest a request waits for a
	// worker before ErrQueueTimeout. It must be above zero when QueueSize is.
	QueueTimeout time.Duration

	// Bulkhead is, in Unbounded mode, the most requests admitted at once.
	// If zero, every request is admitted.
	Bulkhead int
	// BulkheadWait is, in Unbounded mode, the longest a request waits for a
	// place in the bulkhead before ErrBulkheadFull. If zero, a request that
	// finds the bulkhead full is rejected at once.
	BulkheadWait time.Duration

	// MaxInFlightBytes caps the bytes reserved by admitted and waiting
	// requests together; a request whose bytes do not fit is rejected at
	// once with ErrMemoryFull. If zero, bytes are counted but not capped.
	MaxInFlightBytes int64
}

// Limiter admits requests according to its Config. It is safe for
// concurrent use.
type Limiter struct {
	mode  Mode
	limit int   // permits in sem, 0 when sem is nil
	queue int64 // most waiters; -1 when bounded by time only
	wait  time.Duration
	// errFull and errTimeout are what a rejection returns in this mode, so
	// the hot path does not branch on the mode.
	errFull, errTimeout error

	sem *semaphore.Weighted // nil: admit everyone
	mem *semaphore.Weighted // nil: bytes not capped
	// memSize is mem's capacity, to reject at once what can never fit.
	memSize int64

	inFlight, queued, bytes             atomic.Int64
	inFlightPeak, queuedPeak, bytesPeak atomic.Int64
}

// New validates cfg and returns a Limiter.
func New(cfg Config) (*Limiter, error) {
	l := &Limiter{mode: cfg.Mode, memSize: cfg.MaxInFlightBytes}
	var problems []error
	bad := func(format string, args ...any) {
		problems = append(problems, fmt.Errorf("limiter: "+format, args...))
	}
	switch cfg.Mode {
	case Fixed:
		if cfg.Workers < 1 {
			bad("Workers = %d; want at least 1", cfg.Workers)
		}
		if cfg.QueueSize < 0 {
			bad("QueueSize = %d; want 0 or more", cfg.QueueSize)
		}
		if cfg.QueueSize > 0 && cfg.QueueTimeout <= 0 {
			bad("QueueTimeout = %v; want above 0 when QueueSize is %d", cfg.QueueTimeout, cfg.QueueSize)
		}
		if cfg.Bulkhead != 0 || cfg.BulkheadWait != 0 {
			bad("Bulkhead and BulkheadWait apply only to Unbounded mode")
		}
		l.limit, l.queue, l.wait = cfg.Workers, int64(cfg.QueueSize), cfg.QueueTimeout
		if cfg.QueueSize == 0 {
			l.wait = 0
		}
		l.errFull, l.errTimeout = ErrQueueFull, ErrQueueTimeout
	case Unbounded:
		if cfg.Bulkhead < 0 {
			bad("Bulkhead = %d; want 0 or more", cfg.Bulkhead)
		}
		if cfg.BulkheadWait < 0 {
			bad("BulkheadWait = %v; want 0 or more", cfg.BulkheadWait)
		}
		if cfg.Workers != 0 || cfg.QueueSize != 0 || cfg.QueueTimeout != 0 {
			bad("Workers, QueueSize and QueueTimeout apply only to Fixed mode")
		}
		l.limit, l.queue, l.wait = cfg.Bulkhead, -1, cfg.BulkheadWait
		l.errFull, l.errTimeout = ErrBulkheadFull, ErrBulkheadFull
	default:
		bad("unknown mode %v", cfg.Mode)
	}
	if cfg.MaxInFlightBytes < 0 {
		bad("MaxInFlightBytes = %d; want 0 or more", cfg.MaxInFlightBytes)
	}
	if len(problems) > 0 {
		return nil, errors.Join(problems...)
	}
	if l.limit > 0 {
		l.sem = semaphore.NewWeighted(int64(l.limit))
	}
	if cfg.MaxInFlightBytes > 0 {
		l.mem = semaphore.NewWeighted(cfg.MaxInFlightBytes)
	}
	return l, nil
}

// Acquire admits one request that will hold the given bytes, waiting as the
// mode allows. It returns nil, or one of the Err values of this package, or
// ctx.Err() when ctx ends first (the client left). On nil the caller must
// call Release(bytes) exactly once.
func (l *Limiter) Acquire(ctx context.Context, bytes int64) error {
	if bytes < 0 {
		panic("limiter: negative bytes")
	}
	// Memory is reserved before waiting for a worker because a waiting
	// request already holds its buffered body. The memory bulkhead never
	// waits: its purpose is to shed load before memory runs out, and a
	// queue of reservations would hold that memory anyway.
	if l.mem != nil && bytes > 0 && (bytes > l.memSize || !l.mem.TryAcquire(bytes)) {
		return ErrMemoryFull
	}
	peak(&l.bytesPeak, l.bytes.Add(bytes))
	if err := l.admit(ctx); err != nil {
		l.releaseBytes(bytes)
		return err
	}
	return nil
}

// admit takes a permit. The uncontended path is TryAcquire: no context, no
// timer, no allocation.
func (l *Limiter) admit(ctx context.Context) error {
	if l.sem == nil || l.sem.TryAcquire(1) {
		peak(&l.inFlightPeak, l.inFlight.Add(1))
		return nil
	}
	if l.wait <= 0 {
		return l.errFull
	}
	// Count the waiter before checking the bound so that two arrivals cannot
	// both see room for one; the loser undoes its count.
	q := l.queued.Add(1)
	if l.queue >= 0 && q > l.queue {
		l.queued.Add(-1)
		return l.errFull
	}
	peak(&l.queuedPeak, q)
	wctx, cancel := context.WithTimeout(ctx, l.wait)
	err := l.sem.Acquire(wctx, 1)
	cancel()
	// On success, in-flight rises before queued falls so a reader summing
	// the two never sees the request vanish.
	if err == nil {
		peak(&l.inFlightPeak, l.inFlight.Add(1))
		l.queued.Add(-1)
		return nil
	}
	l.queued.Add(-1)
	// Both may be done at once; the client leaving is the truer story and
	// keeps a disconnect from counting as a timeout.
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return l.errTimeout
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
	if bytes < 0 {
		panic("limiter: negative bytes")
	}
	// Never waiting is the point: the request already holds a permit, and
	// waiting for memory while holding one is how two requests deadlock.
	if l.mem != nil && bytes > 0 && (bytes > l.memSize || !l.mem.TryAcquire(bytes)) {
		return false
	}
	peak(&l.bytesPeak, l.bytes.Add(bytes))
	return true
}

// Release returns the permit and bytes of one admitted request.
func (l *Limiter) Release(bytes int64) {
	if l.inFlight.Add(-1) < 0 {
		panic("limiter: released more than acquired")
	}
	if l.sem != nil {
		l.sem.Release(1)
	}
	l.releaseBytes(bytes)
}

func (l *Limiter) releaseBytes(bytes int64) {
	// The count falls before the semaphore gives the bytes back, as it rose
	// only after the semaphore granted them: the count, and so every peak
	// taken of it, never exceeds what the semaphore holds, which never
	// exceeds MaxInFlightBytes.
	l.bytes.Add(-bytes)
	if l.mem != nil && bytes > 0 {
		l.mem.Release(bytes)
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
}

// Stats returns the current state.
func (l *Limiter) Stats() Stats {
	return Stats{
		Mode:       l.mode,
		InFlight:   l.inFlight.Load(),
		Queued:     l.queued.Load(),
		Bytes:      l.bytes.Load(),
		Limit:      l.limit,
		QueueLimit: int(max(l.queue, 0)),
		MaxBytes:   l.memSize,
	}
}

// Peaks reports the highest in-flight, queued and reserved bytes since the
// previous call and starts the next period at the current values, so that a
// scraper sees bursts that happen between its scrapes.
func (l *Limiter) Peaks() (inFlight, queued, bytes int64) {
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
