package admission

import (
	"context"
	"net"
	"testing"
	"testing/synctest"
	"time"

	"github.com/loomgate/loomgate/internal/outcome"
	"github.com/loomgate/loomgate/limiter"
	"github.com/loomgate/loomgate/route"
)

// recorder keeps the records a Gate finishes.
type recorder struct{ got []outcome.Record }

func (r *recorder) Observe(o *outcome.Record) { r.got = append(r.got, *o) }

// client is a protocol's client as a test plays it: its wait's context,
// and whether it left.
type client struct {
	ctx  context.Context
	left bool
}

func (c client) Watch() (context.Context, func()) { return c.ctx, func() {} }
func (c client) Left(context.Context) bool        { return c.left }
func (c client) Header(string) []byte             { return nil }

func newGate(t *testing.T, cfg limiter.Config, obs Observer) (*Gate, *limiter.Limiter) {
	t.Helper()
	lim, err := limiter.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return New(Config{Policy: lim, Observer: obs, Reserve: func(n int) int64 { return 1000 + int64(max(n, 0)) }}), lim
}

// begin is a request for GET target read at now.
func begin(target string, length int) *Request {
	r := new(Request)
	r.Begin(time.Now())
	r.Record.Method, r.Record.Target, r.Length = []byte("GET"), []byte(target), length
	return r
}

// TestGateNamesEachEnding: each way admission ends is one kind of outcome,
// and the answer every protocol gives it.
func TestGateNamesEachEnding(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, lim := newGate(t, limiter.Config{Mode: limiter.Fixed, Workers: 1, MaxInFlightBytes: 5000}, nil)
		first := begin("/a", 0)
		if !g.Admit(first, client{ctx: t.Context()}) {
			t.Fatalf("the first request was refused: %v", first.Record.Kind)
		}
		for _, tt := range []struct {
			name   string
			length int
			kind   outcome.Kind
			status int
		}{
			{"a second, no queue", 0, outcome.RejectedQueueFull, 503},
			{"a body larger than the whole memory bulkhead", 10000, outcome.BadRequest, 413},
		} {
			r := begin("/b", tt.length)
			if g.Admit(r, client{ctx: t.Context()}) {
				t.Fatalf("%s: admitted; want %v", tt.name, tt.kind)
			}
			status, msg, retryAfter := g.Answer(r.Record.Kind)
			if r.Record.Kind != tt.kind || status != tt.status || msg == "" || (retryAfter > 0) != tt.kind.Rejection() {
				t.Errorf("%s: %v, answered %d %q, Retry-After %d; want %v, %d", tt.name, r.Record.Kind, status, msg, retryAfter, tt.kind, tt.status)
			}
			g.Finish(r, time.Now())
		}
		g.Finish(first, time.Now())
		if st := lim.Stats(); st.InFlight != 0 || st.Bytes != 0 {
			t.Errorf("after every Finish, the limiter holds %+v; want nothing", st)
		}
	})
}

// TestGateWaits: a request that must wait waits as its client's context
// allows; one whose client left, or whose own deadline passed, ends as
// the client's doing, and a permit that came as its client left goes back.
func TestGateWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, lim := newGate(t, limiter.Config{Mode: limiter.Fixed, Workers: 1, QueueSize: 10, QueueTimeout: time.Minute}, nil)
		held := begin("/held", 0)
		g.Admit(held, client{ctx: t.Context()})

		gone, cancel := context.WithCancel(t.Context())
		cancel()
		r := begin("/gone", 0)
		if g.Admit(r, client{ctx: gone}) || r.Record.Kind != outcome.ClientClosed || r.Expired() {
			t.Errorf("a client gone while waiting: %v, expired %v; want client_closed", r.Record.Kind, r.Expired())
		}

		expiring, stop := context.WithTimeout(t.Context(), time.Second)
		defer stop()
		r = begin("/deadline", 0)
		r.Deadline = time.Now().Add(time.Second)
		if g.Admit(r, client{ctx: expiring}) || r.Record.Kind != outcome.ClientClosed || !r.Expired() {
			t.Errorf("a wait past the request's deadline: %v, expired %v; want client_closed, expired", r.Record.Kind, r.Expired())
		}
		g.Finish(r, time.Now())
		if r.Record.Queue != time.Second {
			t.Errorf("queue wait %v; want the second waited", r.Record.Queue)
		}

		late := begin("/late", 0)
		done := make(chan bool)
		go func() { done <- g.Admit(late, client{ctx: t.Context(), left: true}) }()
		synctest.Wait()
		g.Finish(held, time.Now())
		if <-done || late.Record.Kind != outcome.ClientClosed {
			t.Errorf("a permit handed to a client that left: %v; want it refused, client_closed", late.Record.Kind)
		}
		if st := lim.Stats(); st.InFlight != 0 || st.Queued != 0 {
			t.Errorf("the limiter holds %+v; want the permit back", st)
		}
	})
}

// TestGateFinishesOneRecord: an admitted request's record has its class,
// its times and its bytes, and a gRPC call that gives its permit back at
// its headers keeps its bytes until it ends.
func TestGateFinishesOneRecord(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var rec recorder
		g, lim := newGate(t, limiter.Config{Mode: limiter.Unbounded}, &rec)
		r := begin("/users/7", 24)
		if !g.Admit(r, client{ctx: t.Context()}) {
			t.Fatal("refused")
		}
		time.Sleep(30 * time.Millisecond)
		g.ReleasePermit(r, time.Now())
		if st := lim.Stats(); st.InFlight != 0 || st.Bytes != 1024 {
			t.Errorf("after the permit went back, the limiter holds %+v; want no permit and the 1024 bytes", st)
		}
		time.Sleep(time.Second)
		g.Finish(r, time.Now())
		if len(rec.got) != 1 {
			t.Fatalf("%d records; want 1", len(rec.got))
		}
		o := rec.got[0]
		if !o.Admission || !o.Admitted || o.Class == 0 || o.Service != 30*time.Millisecond || o.Total != 1030*time.Millisecond || o.Bytes != 1024 {
			t.Errorf("record %+v; want admitted, classified, served 30ms of 1.03s, 1024 bytes", o)
		}
		if st := lim.Stats(); st.Bytes != 0 {
			t.Errorf("after Finish the limiter holds %d bytes; want 0", st.Bytes)
		}
		if got := string(r.AppendServerTiming(nil, r.ServedAt)); got != "queue;dur=0.000, upstream;dur=30.000" {
			t.Errorf("Server-Timing %q; want no queue and 30 ms upstream", got)
		}
	})
}

// headers is a client with request headers.
type headers struct {
	client
	h map[string]string
}

func (c headers) Header(name string) []byte {
	if v, ok := c.h[name]; ok {
		return []byte(v)
	}
	return nil
}

// TestGatePlacesByLevelAndFlow: a request's level is its class's, or
// its priority header's when that names a level; its flow is its flow
// header's value, or its client's address without the port, the same for
// the same key and never none.
func TestGatePlacesByLevelAndFlow(t *testing.T) {
	classes, err := route.Parse("checkout=/checkout,batch=/batch")
	if err != nil {
		t.Fatal(err)
	}
	lim, err := limiter.New(limiter.Config{Mode: limiter.Unbounded, Priorities: true})
	if err != nil {
		t.Fatal(err)
	}
	byHeader := New(Config{Policy: lim, Classes: classes, Priorities: Priorities{
		Levels:     []limiter.Level{limiter.Default, limiter.Critical, limiter.Sheddable}, // other, checkout, batch
		Header:     "X-Priority",
		FlowHeader: "X-Tenant",
	}})
	place := func(g *Gate, target string, h map[string]string, remote net.Addr) *Request {
		r := begin(target, 0)
		r.Record.Remote = remote
		if !g.Admit(r, headers{client{ctx: t.Context()}, h}) {
			t.Fatalf("%s refused: %v", target, r.Record.Kind)
		}
		g.Finish(r, time.Now())
		return r
	}
	for _, tt := range []struct {
		target string
		h      map[string]string
		level  limiter.Level
	}{
		{"/checkout/1", nil, limiter.Critical},
		{"/batch", nil, limiter.Sheddable},
		{"/elsewhere", nil, limiter.Default},
		{"/batch", map[string]string{"X-Priority": "high"}, limiter.High},
		{"/checkout", map[string]string{"X-Priority": "urgent"}, limiter.Critical}, // no such level: the class's
	} {
		r := place(byHeader, tt.target, tt.h, nil)
		if r.Level != tt.level || r.Record.Level != uint8(tt.level) || r.Flow != 0 {
			t.Errorf("%s with %v: level %v (recorded %d), flow %d; want %v, no flow", tt.target, tt.h, r.Level, r.Record.Level, r.Flow, tt.level)
		}
	}
	a1 := place(byHeader, "/", map[string]string{"X-Tenant": "a"}, nil).Flow
	a2 := place(byHeader, "/", map[string]string{"X-Tenant": "a"}, nil).Flow
	b := place(byHeader, "/", map[string]string{"X-Tenant": "b"}, nil).Flow
	if a1 == 0 || a1 != a2 || a1 == b {
		t.Errorf("flows by X-Tenant: a %d and %d, b %d; want a's the same, b's another, none 0", a1, a2, b)
	}

	byClient := New(Config{Policy: lim, Priorities: Priorities{FlowClient: true}})
	one := place(byClient, "/", nil, &net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 40000}).Flow
	again := place(byClient, "/", nil, &net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 40001}).Flow
	other := place(byClient, "/", nil, &net.TCPAddr{IP: net.IPv4(10, 0, 0, 2), Port: 40000}).Flow
	if one == 0 || one != again || one == other {
		t.Errorf("flows by client: 10.0.0.1 %d and %d (two ports), 10.0.0.2 %d; want one flow per address", one, again, other)
	}
}
