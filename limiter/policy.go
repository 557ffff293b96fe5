package limiter

import (
	"context"
	"time"
)

// Request is one request as a Policy sees it. Whoever admits requests
// keeps one for each, from Admit or Wait to Leave, and hands the same one
// to each call.
type Request struct {
	// Bytes is what the request reserves with its permit.
	Bytes int64
	// Level is the request's priority level and Flow the flow it belongs
	// to within its level (0 for none): what a Limiter with
	// Config.Priorities admits the higher levels first by, and queues
	// flows fairly by. Without priorities they are not read.
	Level Level
	Flow  uint64
	// Service is how long the upstream served the request, set before
	// Leave: a dry run's shadow holds its permit that long, and a flow
	// that waited is charged that much of its level's time.
	Service time.Duration
	// ticket is the request's place in a dry run's shadow.
	ticket *Ticket
	// With priorities, a request admitted from the lanes: its queue there
	// and what it was charged for its turn, settled at Leave against its
	// Service.
	lane    uint8
	laned   bool
	charged time.Duration
}

// Policy decides admission, one implementation behind one interface,
// chosen once where the configuration is built: a *Limiter enforces a
// mode (Fixed, Unbounded or Adaptive, its queue FIFO or CoDel); a *DryRun
// admits every request and counts what a Limiter would have done.
type Policy interface {
	// Admit admits r at now if it can be admitted at once, and returns
	// nil (r then holds a permit and r.Bytes until Leave), a rejection of
	// this package, or ErrMustWait when only Wait could admit it. It is
	// the path of every request: no context, no timer, no allocation.
	Admit(now time.Time, r *Request) error
	// Wait admits r after a wait, as the policy allows: nil (as Admit),
	// a rejection, or ctx.Err() when ctx ends first (the client left).
	Wait(ctx context.Context, r *Request) error
	// Leave gives back r's permit at now, a clock reading the caller
	// took, and bytes of what r reserved: all of them, or fewer for a
	// request that keeps its buffers past its permit (a gRPC stream past
	// its headers), which gives the rest back with ReleaseBytes.
	Leave(now time.Time, r *Request, bytes int64)
	// TryReserve reserves bytes at once or not at all, never waiting: for
	// a request that learns late what it will hold (a response body), or
	// for an answer of the proxy's own. ReleaseBytes, or a Leave that
	// counts them, gives them back.
	TryReserve(bytes int64) bool
	// ReleaseBytes gives back bytes held without a permit.
	ReleaseBytes(bytes int64)
	// RejectWaiting rejects every request waiting, as at its timeout, and
	// from then on every one that would wait: a drain's time is up.
	RejectWaiting()
	// Stats is what is held now, for real.
	Stats() Stats
}

// DryRun is a dry run of a Limiter: it admits every request, as Unbounded
// mode without a bulkhead does, and runs the Limiter beside them as its
// Shadow, which reports what its mode would have done with each. Nothing
// is held back: its Stats, and its Held limiter's peaks and
// request-seconds, are of the requests it admits for real, while the
// shadowed Limiter's own limit is what the mode would enforce.
type DryRun struct {
	held   *Limiter
	shadow *Shadow
}

// NewDryRun runs policy as a dry run, telling report of every decision
// (see NewShadow).
func NewDryRun(policy *Limiter, report func(Decision)) *DryRun {
	// Unbounded without a bulkhead or a memory bulkhead: valid, and never
	// refuses or waits.
	held, _ := New(Config{Mode: Unbounded})
	return &DryRun{held: held, shadow: NewShadow(policy, report)}
}

// Admit puts r into the shadow as it arrives, and admits it.
func (d *DryRun) Admit(now time.Time, r *Request) error {
	r.ticket = d.shadow.Arrive(r.Bytes, r.Level, r.Flow)
	err := d.held.TryAcquireAt(now, r.Bytes)
	if err != nil {
		d.leaveShadow(r)
	}
	return err
}

// Wait is never needed: Admit admits at once. It admits, as Admit does.
func (d *DryRun) Wait(ctx context.Context, r *Request) error {
	if r.ticket == nil {
		r.ticket = d.shadow.Arrive(r.Bytes, r.Level, r.Flow)
	}
	err := d.held.Acquire(ctx, r.Bytes)
	if err != nil {
		d.leaveShadow(r)
	}
	return err
}

// Leave gives back r's permit and tells the shadow how long r was served.
func (d *DryRun) Leave(now time.Time, r *Request, bytes int64) {
	d.held.ReleaseAt(now, bytes)
	d.leaveShadow(r)
}

func (d *DryRun) leaveShadow(r *Request) {
	if r.ticket != nil {
		r.ticket.Leave(r.Service)
		r.ticket = nil
	}
}

// TryReserve reserves bytes for real; the shadow never sees them.
func (d *DryRun) TryReserve(bytes int64) bool { return d.held.TryReserve(bytes) }

// ReleaseBytes gives back bytes held for real.
func (d *DryRun) ReleaseBytes(bytes int64) { d.held.ReleaseBytes(bytes) }

// RejectWaiting does nothing: nothing waits for real, and what waits in
// the shadow is the shadow's until Close.
func (d *DryRun) RejectWaiting() {}

// Stats is what is held for real: the shadow's state is its Limiter's.
func (d *DryRun) Stats() Stats { return d.held.Stats() }

// Held is the limiter that holds what the dry run admits for real: its
// peaks and request-seconds are the traffic's.
func (d *DryRun) Held() *Limiter { return d.held }

// Shadow is the dry run's shadow, whose Limiter is the mode's.
func (d *DryRun) Shadow() *Shadow { return d.shadow }

// Close ends the shadow (see Shadow.Close).
func (d *DryRun) Close() { d.shadow.Close() }
