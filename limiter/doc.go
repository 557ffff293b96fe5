// Package limiter admits requests to an upstream in one of three modes.
//
// Fixed admits at most Workers requests at once; the rest wait in a queue
// of at most QueueSize waiters for at most QueueTimeout. It is a servlet
// container's thread pool with its accept queue made explicit.
//
// Unbounded admits every request, like virtual threads or an async server.
// With a Bulkhead it admits at most that many at once, and a request waits at
// most BulkheadWait for a place before it is rejected.
//
// Adaptive admits every request until a controller outside the package
// sets a limit (SetLimit), then at most that many at once, queueing the
// rest as Fixed does; Ceiling bounds admission, before the first limit too.
//
// The queue of Fixed and Adaptive is FIFO, or CoDel (QueuePolicy), which
// under sustained overload rejects waits past QueueTarget and admits the
// newest waiter first.
//
// In any mode, a probe (Config.Probe, SetProbe) may cap admission below
// the mode's limit for a few seconds, holding requests back in the queue
// without rejecting them, so that the upstream is seen with fewer inside.
//
// Every mode can be combined with a memory bulkhead (MaxInFlightBytes):
// each request reserves the bytes it may hold, and a request whose
// reservation does not fit is rejected at once. An admitted request may
// reserve more with TryReserve, which never waits, when it learns late what
// it will hold.
//
// A Limiter hands out permits; every successful TryAcquire or Acquire must
// be matched by exactly one Release with the bytes that request reserved,
// through it and TryReserve together. TryAcquire is the uncontended path on
// its own: no context, no timer, no allocation; a caller that makes the
// context of a wait only when there is one calls Acquire when it answers
// ErrMustWait. A waiting request costs no goroutine or timer of its own.
// TryAcquireAt and ReleaseAt take a clock reading the caller has already;
// in pass-through (Unbounded without a bulkhead) they take no lock that
// every request shares.
//
// RequestSeconds keeps the time-integrals of the requests in flight and
// waiting, updated at every admission, release and departure from the
// queue: the mean concurrency over any span is their increase over its
// length, with no burst missed between two readings.
package limiter
