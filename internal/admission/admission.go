package admission

import (
	"cmp"
	"context"
	"errors"
	"hash/maphash"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/loomgate/loomgate/internal/outcome"
	"github.com/loomgate/loomgate/limiter"
	"github.com/loomgate/loomgate/route"
)

// Observer receives each request's Record once, after its response.
// Observe is called concurrently and on the request's path: it must be
// quick, and copy what it keeps (see outcome.Record).
type Observer interface {
	Observe(*outcome.Record)
}

// Client is what the Gate asks a request's protocol about its client. A
// protocol's per-request state implements it; the Gate calls it only
// during Admit.
type Client interface {
	// Watch returns a context that ends when the client leaves, or when
	// its own deadline passes, and the function that stops watching. Only
	// a request that must wait asks for one.
	Watch() (context.Context, func())
	// Left reports, once a wait has admitted the request, whether its
	// client left meanwhile: a watch that looks now and then can miss a
	// departure just before the admission, and a permit handed to a
	// client that left would send the upstream a request nobody reads.
	// ctx is Watch's.
	Left(ctx context.Context) bool
	// Header returns the value of the request's header field name (a
	// gRPC call's metadata are its header fields), nil if it has none,
	// valid until Admit returns: what a priority level or a flow may be
	// read from.
	Header(name string) []byte
}

// Config describes a Gate.
type Config struct {
	// Policy admits requests. Required.
	Policy limiter.Policy
	// Observer receives each request's Record. If nil, records are
	// dropped.
	Observer Observer
	// Classes sorts requests into route classes, once each, as they meet
	// admission. If nil, automatically (route.Parse("")).
	Classes *route.Classes
	// Reserve returns the bytes a request reserves, given its declared
	// body length (-1 when unknown). If nil, 0, and an answer of the
	// proxy's own reserves nothing either (see ReserveAnswer); a response
	// body is charged whatever it is (see Reserve).
	Reserve func(length int) int64
	// RejectStatus answers a rejection: 503 or 429. If zero, 503.
	RejectStatus int
	// RetryAfter returns the delay a rejected client is told to wait, for
	// the Retry-After header; it is rounded up to whole seconds, at least
	// 1. If nil, 1 second.
	RetryAfter func(outcome.Kind) time.Duration
	// Logger receives a policy's failure and an observer's panic. If nil,
	// slog.Default().
	Logger *slog.Logger
	// Priorities, if On, gives each request its priority level and its
	// flow, for a Policy that admits by them (limiter.Config.Priorities).
	Priorities Priorities
}

// Priorities tells a request's priority level and its flow within it.
type Priorities struct {
	// Levels is each route class's level, by the class's index; a class
	// past its end is Default.
	Levels []limiter.Level
	// Header, if set, names a request header (a gRPC call's metadata) whose
	// value, a level's name, sets the request's level in place of its
	// class's. A value that names no level is ignored.
	Header string
	// FlowHeader, if set, names a header whose value is the request's
	// flow (a tenant's id); FlowClient keys flows by the client's address
	// instead. A request with neither has no flow.
	FlowHeader string
	FlowClient bool
}

// On reports whether any is set: otherwise every request is Default,
// with no flow, and reads no header for it.
func (p Priorities) On() bool {
	return p.Levels != nil || p.Header != "" || p.FlowHeader != "" || p.FlowClient
}

// Gate is the admission path every request takes. It is safe for
// concurrent use; each Request is one goroutine's at a time.
type Gate struct {
	policy       limiter.Policy
	observer     Observer
	classes      *route.Classes
	reserve      func(int) int64
	rejectStatus int
	retryAfter   func(outcome.Kind) time.Duration
	log          *slog.Logger
	prio         Priorities
	prioOn       bool
	seed         maphash.Seed
}

// New returns a Gate; cfg.Policy must be set.
func New(cfg Config) *Gate {
	g := &Gate{
		policy: cfg.Policy, observer: cfg.Observer, classes: cfg.Classes, reserve: cfg.Reserve,
		rejectStatus: cmp.Or(cfg.RejectStatus, 503), retryAfter: cfg.RetryAfter, log: cfg.Logger,
		prio: cfg.Priorities, prioOn: cfg.Priorities.On(), seed: maphash.MakeSeed(),
	}
	if g.classes == nil {
		g.classes, _ = route.Parse("")
	}
	if g.log == nil {
		g.log = slog.Default()
	}
	return g
}

// Policy is the policy the Gate enforces.
func (g *Gate) Policy() limiter.Policy { return g.policy }

// Request is one request on its way through the Gate. A protocol keeps
// one with its own state for each request (pooled, as that state is), and
// Begins it for each.
type Request struct {
	// The policy's part: the bytes the request reserves, and the room for
	// its priority level and flow.
	limiter.Request
	// Record is the request's one record. The protocol sets Method,
	// Target and Remote before Admit, and Status, UpstreamStatus,
	// UpstreamErr and, where the upstream or the client ended the request,
	// Kind as the exchange goes; the Gate sets the rest, Class at Admit.
	Record outcome.Record
	// Length is the request body's declared length, -1 when unknown: what
	// its reservation is sized by, and what tells a body too large for
	// the whole memory bulkhead from back pressure.
	Length int
	// Deadline is the client's own deadline for the request (a gRPC
	// call's grpc-timeout), zero for none: a wait that outlives it ends
	// as the client's doing, DEADLINE_EXCEEDED, not a rejection.
	Deadline time.Time
	// Start is when the request was read: its queue wait and total time
	// are measured from it.
	Start time.Time
	// AdmittedAt is when the Gate admitted the request: Start when it was
	// admitted at once, which needs no clock reading of its own.
	AdmittedAt time.Time
	// ServedAt is when the upstream's service ended, its last byte or,
	// for a call that gives its permit back early, its headers: the
	// protocol sets it, or ReleasePermit does. If it is not set by Finish,
	// the service ends there.
	ServedAt time.Time

	refusedAt time.Time
	// asked is set once the request met the Policy; waited if it had to
	// wait; admitted once the Policy admitted it; permit while it holds
	// the permit.
	asked, waited, admitted, permit bool
	// expired is set when the wait outlived the request's Deadline.
	expired bool
	// holding is the bytes the request holds now, its reservation and
	// what was added to it, or an answer's: Finish gives them back.
	holding int64
}

// Begin readies r for a request read at start, with what a previous one
// left cleared: every field is set anew, none carried over.
func (r *Request) Begin(start time.Time) {
	*r = Request{Start: start, Record: outcome.Record{Kind: outcome.OK}}
}

// Admitted reports whether the Gate admitted r.
func (r *Request) Admitted() bool { return r.admitted }

// Waited reports whether r had to wait for its admission.
func (r *Request) Waited() bool { return r.waited }

// Expired reports whether r waited past its Deadline: refused as the
// client's doing, its answer must say DEADLINE_EXCEEDED, as its client's
// own timer does.
func (r *Request) Expired() bool { return r.expired }

// Admit classifies r, reserves its bytes and asks the Policy to admit it,
// at its Start; a request that must wait waits, watched by c. It reports
// whether r was admitted, and then r holds a permit until Finish. If not,
// r.Record.Kind says why: a rejection (answered with Retry-After), a body
// larger than the whole memory bulkhead (BadRequest, 413), a client that
// left or whose own deadline passed (ClientClosed; see Expired), or a
// policy that failed (InternalError).
func (g *Gate) Admit(r *Request, c Client) bool {
	admitted, wait := g.TryAdmit(r, c)
	if wait {
		return g.Await(r, c)
	}
	return admitted
}

// TryAdmit is Admit without the wait: it reports whether r was admitted
// at once, or, with wait, that r must wait, which Await then does. A
// protocol that serves many requests from one goroutine (an HTTP/2
// connection's frames) admits on that goroutine and waits on another only
// for a request that must.
func (g *Gate) TryAdmit(r *Request, c Client) (admitted, wait bool) {
	r.Record.Class = g.classes.Class(r.Record.Method, r.Record.Target)
	if g.prioOn {
		g.place(r, c)
	}
	if g.reserve != nil {
		r.Bytes = g.reserve(r.Length)
	}
	r.asked = true
	// Admitted at once, the request did not queue: its admission is its
	// start.
	r.AdmittedAt = r.Start
	err := g.policy.Admit(r.Start, &r.Request)
	if err == limiter.ErrMustWait {
		return false, true
	}
	return g.settle(r, err), false
}

// Await waits for the admission of r, which TryAdmit said must wait,
// watched by c, and reports whether r was admitted, as Admit does.
func (g *Gate) Await(r *Request, c Client) bool {
	return g.settle(r, g.wait(r, c))
}

// settle records the Policy's answer to r.
func (g *Gate) settle(r *Request, err error) bool {
	if err != nil {
		g.refuse(r, err)
		return false
	}
	r.admitted, r.permit, r.holding = true, true, r.Bytes
	return true
}

// place gives r its level, from its class or its header, and its flow.
func (g *Gate) place(r *Request, c Client) {
	r.Level = limiter.Default
	if cl := r.Record.Class; cl >= 0 && cl < len(g.prio.Levels) {
		r.Level = g.prio.Levels[cl]
	}
	if g.prio.Header != "" {
		var lv limiter.Level
		if v := c.Header(g.prio.Header); v != nil && lv.UnmarshalText(v) == nil {
			r.Level = lv
		}
	}
	switch {
	case g.prio.FlowHeader != "":
		if v := c.Header(g.prio.FlowHeader); len(v) > 0 {
			r.Flow = maphash.Bytes(g.seed, v) | 1 // never 0, which is none
		}
	case g.prio.FlowClient && r.Record.Remote != nil:
		// The address without its port: a client's connections are one
		// flow.
		if a, ok := r.Record.Remote.(*net.TCPAddr); ok {
			r.Flow = maphash.Bytes(g.seed, a.IP) | 1
		} else {
			r.Flow = maphash.String(g.seed, r.Record.Remote.String()) | 1
		}
	}
	r.Record.Level = uint8(r.Level)
}

// wait is the slow path of admission: the request waits, its client
// watched so that a client who leaves ends the wait.
func (g *Gate) wait(r *Request, c Client) error {
	r.waited = true
	ctx, done := c.Watch()
	defer done()
	err := g.policy.Wait(ctx, &r.Request)
	now := time.Now()
	if err == nil && c.Left(ctx) {
		g.policy.Leave(now, &r.Request, r.Bytes)
		err = cmp.Or(ctx.Err(), context.Canceled)
	}
	if err == nil {
		r.AdmittedAt = now
	} else {
		r.refusedAt = now
	}
	return err
}

// refuse records why admission refused r.
func (g *Gate) refuse(r *Request, err error) {
	if r.refusedAt.IsZero() {
		r.refusedAt = time.Now()
	}
	o := &r.Record
	switch {
	case errors.Is(err, limiter.ErrQueueFull):
		o.Kind = outcome.RejectedQueueFull
	case errors.Is(err, limiter.ErrQueueTimeout):
		o.Kind = outcome.RejectedQueueTimeout
	case errors.Is(err, limiter.ErrBulkheadFull):
		o.Kind = outcome.RejectedBulkhead
	case errors.Is(err, limiter.ErrTooLarge) && r.Length > 0:
		// The declared body alone is more than the whole memory bulkhead:
		// no wait and no retry would admit it, so it is a body too large
		// (413, with no Retry-After), not back pressure.
		o.Kind = outcome.BadRequest
	case errors.Is(err, limiter.ErrMemoryFull):
		o.Kind = outcome.RejectedMemory
	case errors.Is(err, context.DeadlineExceeded) && !r.Deadline.IsZero():
		// The request's own deadline passed in the queue: the client's
		// doing, and its own timer says DEADLINE_EXCEEDED.
		o.Kind, o.Status, r.expired = outcome.ClientClosed, outcome.StatusClientClosed, true
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		o.Kind, o.Status = outcome.ClientClosed, outcome.StatusClientClosed
	default:
		g.log.Error("admission policy failed", "err", err)
		o.Kind = outcome.InternalError
	}
}

// Reserve adds bytes to what admitted r holds, at once or not at all,
// never waiting: a response body it is about to buffer, whose size was
// known only when its headers arrived. Refused, r must not hold them (it
// streams the body instead).
func (g *Gate) Reserve(r *Request, bytes int64) bool {
	if !g.policy.TryReserve(bytes) {
		return false
	}
	r.Bytes += bytes
	r.holding += bytes
	return true
}

// ReserveAnswer reserves bytes for an answer of the proxy's own to r while
// the answer waits for its client, unless r holds bytes already, and
// reports whether the answer may have its body.
func (g *Gate) ReserveAnswer(r *Request, bytes int64) bool {
	if r.holding > 0 || g.reserve == nil {
		return true
	}
	if !g.policy.TryReserve(bytes) {
		return false
	}
	r.holding = bytes
	return true
}

// ReleasePermit gives back r's permit at now, the end of its service (a
// gRPC call's response headers), and keeps its bytes until Finish: the
// rest of a stream holds no worker, but holds its buffers.
func (g *Gate) ReleasePermit(r *Request, now time.Time) {
	if !r.permit {
		return
	}
	r.permit = false
	r.ServedAt = now
	r.Service = now.Sub(r.AdmittedAt)
	g.policy.Leave(now, &r.Request, 0)
}

// Finish ends r at now, a clock reading the protocol took as the request
// ended (its response written, or its end found): it completes the Record,
// gives back the permit and the bytes r holds, and hands the Record to the
// Observer. r may be reused once it returns.
func (g *Gate) Finish(r *Request, now time.Time) {
	o := &r.Record
	o.Total = now.Sub(r.Start)
	o.End = now
	o.Bytes = r.Bytes
	o.Admission, o.Admitted = r.asked, r.admitted
	switch {
	case r.admitted:
		o.Queue = r.AdmittedAt.Sub(r.Start)
		if r.ServedAt.IsZero() {
			r.ServedAt = now
		}
		o.Service = r.ServedAt.Sub(r.AdmittedAt)
	case r.asked:
		// Refused: the whole wait was queueing, up to the refusal.
		o.Queue = r.refusedAt.Sub(r.Start)
	}
	if r.permit {
		r.permit = false
		r.Service = o.Service
		g.policy.Leave(now, &r.Request, r.holding)
	} else if r.holding > 0 {
		g.policy.ReleaseBytes(r.holding)
	}
	r.holding = 0
	g.Observe(o)
}

// Observe hands o to the Observer: what Finish does, and what a protocol
// does for a request it answered before it could begin one (a header
// block it could not read).
func (g *Gate) Observe(o *outcome.Record) {
	if g.observer == nil {
		return
	}
	defer func() {
		// An observer's bug must cost a measurement, not the process.
		if r := recover(); r != nil {
			g.log.Error("observer panicked", "panic", r)
		}
	}()
	g.observer.Observe(o)
}

// AppendServerTiming appends r's Server-Timing value (W3C Server Timing):
// "queue;dur=<ms>, upstream;dur=<ms>", the wait for admission (or
// refusal), and the upstream's time from admission to end, a clock reading
// the protocol took when the header had to be written: the service's end,
// or for a response that streams, its headers.
func (r *Request) AppendServerTiming(b []byte, end time.Time) []byte {
	var queue, upstream time.Duration
	switch {
	case r.admitted:
		queue = r.AdmittedAt.Sub(r.Start)
		upstream = end.Sub(r.AdmittedAt)
	case r.asked:
		queue = r.refusedAt.Sub(r.Start)
	}
	b = append(b, "queue;dur="...)
	b = appendMillis(b, queue)
	b = append(b, ", upstream;dur="...)
	return appendMillis(b, upstream)
}

// appendMillis writes d in milliseconds with three decimals, as
// strconv.AppendFloat(b, ms, 'f', 3, 64) would (half a microsecond rounds
// up), in integers: float formatting took more of a request's time than
// the rest of the header's writing.
func appendMillis(b []byte, d time.Duration) []byte {
	if d < 0 {
		b = append(b, '-')
		d = -d
	}
	us := (d + time.Microsecond/2) / time.Microsecond
	b = strconv.AppendInt(b, int64(us/1000), 10)
	frac := us % 1000
	return append(b, '.', byte('0'+frac/100), byte('0'+frac/10%10), byte('0'+frac%10))
}
