package proxy

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/loomgate/loomgate/internal/h2c"
	"github.com/loomgate/loomgate/limiter"
)

// slowHealth is a health service whose Check sleeps for the duration named
// by its service ("300ms"), records the deadline it saw, and sets a
// header and a trailer.
type slowHealth struct {
	healthpb.UnimplementedHealthServer
	mu        sync.Mutex
	deadlines []time.Duration // the time left at arrival, 0 without a deadline
}

func (s *slowHealth) Check(ctx context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	var left time.Duration
	if d, ok := ctx.Deadline(); ok {
		left = time.Until(d)
	}
	s.mu.Lock()
	s.deadlines = append(s.deadlines, left)
	s.mu.Unlock()
	if d, err := time.ParseDuration(req.Service); err == nil {
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
	grpc.SetHeader(ctx, metadata.Pairs("x-header", "h"))
	grpc.SetTrailer(ctx, metadata.Pairs("x-trailer", "t"))
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

// grpcUpstream runs a gRPC server on loopback (h2c) with the standard
// health service, or slow's when it is given.
func grpcUpstream(t *testing.T, svc healthpb.HealthServer) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, svc)
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	return "http://" + ln.Addr().String()
}

func grpcClient(t *testing.T, addr string) healthpb.HealthClient {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return healthpb.NewHealthClient(cc)
}

// TestGRPCThroughProxy: in both modes, the standard health service's
// unary Check and server-streaming Watch pass through, each call one
// Outcome; a Watch holds its permit only until its first message.
func TestGRPCThroughProxy(t *testing.T) {
	for _, lcfg := range []limiter.Config{
		{Mode: limiter.Fixed, Workers: 1, QueueSize: 10, QueueTimeout: time.Second},
		{Mode: limiter.Unbounded},
	} {
		t.Run(lcfg.Mode.String(), func(t *testing.T) {
			hs := health.NewServer()
			tp := startProxy(t, grpcUpstream(t, hs), lcfg, nil)
			c := grpcClient(t, tp.addr)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			var hdr metadata.MD
			resp, err := c.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&hdr))
			if err != nil || resp.Status != healthpb.HealthCheckResponse_SERVING {
				t.Fatalf("Check = %v, %v", resp, err)
			}
			if st := hdr.Get("server-timing"); len(st) == 0 || !strings.HasPrefix(st[0], "queue;dur=") {
				t.Errorf("headers %v; want Server-Timing", hdr)
			}
			if o := tp.rec.wait(t, 1)[0]; o.Kind != OK || o.Status != 200 || !o.Admitted || string(o.Target) != "/grpc.health.v1.Health/Check" {
				t.Errorf("Check outcome = %+v", o)
			}

			w, err := c.Watch(ctx, &healthpb.HealthCheckRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if m, err := w.Recv(); err != nil || m.Status != healthpb.HealthCheckResponse_SERVING {
				t.Fatalf("Watch first = %v, %v", m, err)
			}
			tp.waitIdle(t) // the stream goes on without its permit
			// With a fixed pool of one, a call beside the stream is served.
			if _, err := c.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
				t.Fatalf("Check beside the stream = %v", err)
			}
			hs.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
			if m, err := w.Recv(); err != nil || m.Status != healthpb.HealthCheckResponse_NOT_SERVING {
				t.Fatalf("Watch second = %v, %v", m, err)
			}
			time.Sleep(50 * time.Millisecond)
			cancel()
			outs := tp.rec.wait(t, 3)
			for _, o := range outs {
				if string(o.Target) == "/grpc.health.v1.Health/Watch" && o.Service > o.Total-40*time.Millisecond {
					t.Errorf("Watch outcome %+v: service time should end at the first message", o)
				}
			}
		})
	}
}

// TestGRPCAdmission: queued calls wait and keep their deadline, which goes
// upstream as what is left of it; a full queue is RESOURCE_EXHAUSTED to the
// client, with Loomgate-Outcome; trailers arrive intact.
func TestGRPCAdmission(t *testing.T) {
	slow := &slowHealth{}
	tp := startProxy(t, grpcUpstream(t, slow), limiter.Config{Mode: limiter.Fixed, Workers: 1, QueueSize: 1, QueueTimeout: 5 * time.Second}, nil)
	c := grpcClient(t, tp.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	first := make(chan error, 1)
	go func() {
		_, err := c.Check(ctx, &healthpb.HealthCheckRequest{Service: "400ms"})
		first <- err
	}()
	for tp.limiter.Stats().InFlight == 0 {
		time.Sleep(time.Millisecond)
	}
	queued := make(chan error, 1)
	var trailer metadata.MD
	go func() {
		qctx, qcancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer qcancel()
		_, err := c.Check(qctx, &healthpb.HealthCheckRequest{Service: "0s"}, grpc.Trailer(&trailer))
		queued <- err
	}()
	for tp.limiter.Stats().Queued == 0 {
		time.Sleep(time.Millisecond)
	}
	// Worker busy, queue full: the third is refused as a gRPC status.
	var md metadata.MD
	_, err := c.Check(ctx, &healthpb.HealthCheckRequest{Service: "0s"}, grpc.Trailer(&md))
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("third call = %v; want RESOURCE_EXHAUSTED", err)
	}
	if got := md.Get("loomgate-outcome"); len(got) != 1 || got[0] != "rejected_queue_full" {
		t.Errorf("rejection metadata %v; want loomgate-outcome rejected_queue_full", md)
	}
	if err := <-first; err != nil {
		t.Errorf("first call = %v", err)
	}
	if err := <-queued; err != nil {
		t.Errorf("queued call = %v", err)
	}
	if got := trailer.Get("x-trailer"); len(got) != 1 || got[0] != "t" {
		t.Errorf("trailer %v; want x-trailer t", trailer)
	}
	slow.mu.Lock()
	left := slow.deadlines[1]
	slow.mu.Unlock()
	if left <= 0 || left > 1700*time.Millisecond {
		t.Errorf("queued call's deadline upstream = %v; want its 2s less the ~400ms queued", left)
	}
	var queuedOutcome Outcome
	for _, o := range tp.rec.wait(t, 3) {
		if o.Kind == OK && o.Queue > queuedOutcome.Queue {
			queuedOutcome = o
		}
	}
	if queuedOutcome.Queue < 300*time.Millisecond {
		t.Errorf("longest queue wait %v; want most of 400ms", queuedOutcome.Queue)
	}
	tp.waitIdle(t)
}

// TestGRPCDeadlineInQueue: a call whose deadline passes in the queue ends
// there, never reaching the upstream.
func TestGRPCDeadlineInQueue(t *testing.T) {
	t.Parallel()
	slow := &slowHealth{}
	tp := startProxy(t, grpcUpstream(t, slow), limiter.Config{Mode: limiter.Fixed, Workers: 1, QueueSize: 10, QueueTimeout: 5 * time.Second}, nil)
	c := grpcClient(t, tp.addr)
	go c.Check(context.Background(), &healthpb.HealthCheckRequest{Service: "500ms"})
	for tp.limiter.Stats().InFlight == 0 {
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := c.Check(ctx, &healthpb.HealthCheckRequest{Service: "0s"})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("call = %v; want DEADLINE_EXCEEDED", err)
	}
	outs := tp.rec.wait(t, 2)
	if outs[0].Kind != ClientClosed || outs[0].Admitted {
		t.Errorf("outcome = %+v; want client_closed, not admitted", outs[0])
	}
	slow.mu.Lock()
	defer slow.mu.Unlock()
	if len(slow.deadlines) != 1 {
		t.Errorf("upstream saw %d calls; want 1", len(slow.deadlines))
	}
}

// TestGRPCDeadlineAtTheUpstreamIsTheClients: a call whose own deadline
// (grpc-timeout) passes while the upstream serves it is the client's
// choice to wait no longer, as on HTTP/1.1 a client that gives up: counted
// client_closed, not upstream_timeout, which is UpstreamTimeout's. Unary,
// and a server stream that the upstream, told of the deadline, resets when
// it passes (which was counted upstream_error).
func TestGRPCDeadlineAtTheUpstreamIsTheClients(t *testing.T) {
	t.Parallel()
	t.Run("unary", func(t *testing.T) {
		tp := startProxy(t, grpcUpstream(t, &slowHealth{}), limiter.Config{Mode: limiter.Unbounded}, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		_, err := grpcClient(t, tp.addr).Check(ctx, &healthpb.HealthCheckRequest{Service: "2s"})
		if status.Code(err) != codes.DeadlineExceeded {
			t.Errorf("call = %v; want DEADLINE_EXCEEDED", err)
		}
		if o := tp.rec.wait(t, 1)[0]; o.Kind != ClientClosed || !o.Admitted {
			t.Errorf("outcome %v (admitted %v); want client_closed, admitted", o.Kind, o.Admitted)
		}
	})
	t.Run("stream", func(t *testing.T) {
		// The upstream sends the response's header at once, then resets
		// the stream when the call's deadline passes, as a gRPC server
		// whose handler returns at its deadline may.
		up := h2cUpstream(t, func(w http.ResponseWriter, r *http.Request) {
			left := 5 * time.Second
			if d, ok := h2c.ParseGRPCTimeout(r.Header.Get("Grpc-Timeout")); ok {
				left = d
			}
			w.Header().Set("Content-Type", "application/grpc")
			w.WriteHeader(http.StatusOK)
			http.NewResponseController(w).Flush()
			select {
			case <-time.After(left):
				panic(http.ErrAbortHandler)
			case <-r.Context().Done():
			}
		})
		tp := startProxy(t, up, limiter.Config{Mode: limiter.Unbounded}, nil)
		// Not the client's own timer: its reset would race the
		// upstream's, and the case is the upstream's coming first.
		req, err := http.NewRequest(http.MethodPost, "http://"+tp.addr+"/grpc.health.v1.Health/Watch", strings.NewReader("\x00\x00\x00\x00\x00"))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/grpc")
		req.Header.Set("Te", "trailers")
		req.Header.Set("Grpc-Timeout", "300m")
		resp, err := h2cClient().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if o := tp.rec.wait(t, 1)[0]; o.Kind != ClientClosed {
			t.Errorf("outcome %v; want client_closed: the call's own deadline ended it", o.Kind)
		}
	})
}

// TestGRPCUpstreamDown: no upstream is UNAVAILABLE, counted upstream_error.
func TestGRPCUpstreamDown(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	tp := startProxy(t, "http://"+addr, limiter.Config{Mode: limiter.Unbounded}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := grpcClient(t, tp.addr).Check(ctx, &healthpb.HealthCheckRequest{})
	if status.Code(err) != codes.Unavailable {
		t.Errorf("call = %v; want UNAVAILABLE", err)
	}
	var ce *ConnectError
	if o := tp.rec.wait(t, 1)[0]; o.Kind != UpstreamError || !errors.As(o.UpstreamErr, &ce) {
		t.Errorf("outcome = %+v; want upstream_error, its UpstreamErr a *ConnectError", o)
	}
}

// h2cUpstream is an HTTP server on loopback that speaks HTTP/1.1 and h2c.
func h2cUpstream(t *testing.T, handler http.HandlerFunc) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	protos := new(http.Protocols)
	protos.SetHTTP1(true)
	protos.SetUnencryptedHTTP2(true)
	srv := &http.Server{Handler: handler, Protocols: protos}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}

// h2cClient speaks HTTP/2 with prior knowledge.
func h2cClient() *http.Client {
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: tr, Timeout: 5 * time.Second}
}

// TestH2CThroughProxy: plain HTTP/2 requests are forwarded as HTTP/2, with
// Server-Timing and the Host as sent; rejections are HTTP/1.1's, and
// HTTP/1.1 on the same listener is unchanged.
func TestH2CThroughProxy(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	up := h2cUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			<-release
		}
		w.Header().Set("Trailer", "X-Sum")
		io.WriteString(w, r.Proto+" "+r.Host)
		w.Header().Set("X-Sum", "42")
	})
	tp := startProxy(t, up, limiter.Config{Mode: limiter.Fixed, Workers: 1, QueueSize: 0}, nil)
	c := h2cClient()
	resp, err := c.Get("http://" + tp.addr + "/a")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.ProtoMajor != 2 || string(body) != "HTTP/2.0 "+tp.addr || resp.Trailer.Get("X-Sum") != "42" ||
		!strings.HasPrefix(resp.Header.Get("Server-Timing"), "queue;dur=") {
		t.Errorf("response %s %q trailer %v headers %v", resp.Proto, body, resp.Trailer, resp.Header)
	}
	go c.Get("http://" + tp.addr + "/hold")
	for tp.limiter.Stats().InFlight == 0 {
		time.Sleep(time.Millisecond)
	}
	resp, err = c.Get("http://" + tp.addr + "/b")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 || resp.Header.Get("Loomgate-Outcome") != "rejected_queue_full" || resp.Header.Get("Retry-After") != "1" {
		t.Errorf("rejection = %d %v", resp.StatusCode, resp.Header)
	}
	close(release)
	tp.waitIdle(t)
	if r, b := doGet(t, tp.addr, "/c"); r.StatusCode != 200 || b != "HTTP/1.1 test.local" {
		t.Errorf("HTTP/1.1 beside = %d %q", r.StatusCode, b)
	}
	tp.waitIdle(t)
}

// TestH2CDrain: on Shutdown a call in flight finishes, and a new one on
// the same connection is not admitted.
func TestH2CDrain(t *testing.T) {
	slow := &slowHealth{}
	tp := startProxy(t, grpcUpstream(t, slow), limiter.Config{Mode: limiter.Unbounded}, nil)
	c := grpcClient(t, tp.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	inFlight := make(chan error, 1)
	go func() {
		_, err := c.Check(ctx, &healthpb.HealthCheckRequest{Service: "300ms"})
		inFlight <- err
	}()
	for tp.limiter.Stats().InFlight == 0 {
		time.Sleep(time.Millisecond)
	}
	shut := make(chan error, 1)
	go func() { shut <- tp.proxy.Shutdown(ctx) }()
	if err := <-inFlight; err != nil {
		t.Errorf("call in flight = %v; want it to finish", err)
	}
	if err := <-shut; err != nil {
		t.Errorf("Shutdown = %v", err)
	}
	if _, err := c.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(false)); status.Code(err) != codes.Unavailable {
		t.Errorf("call after the drain = %v; want UNAVAILABLE", err)
	}
}

// TestCurlPriorKnowledge: curl's own HTTP/2 with prior knowledge.
func TestCurlPriorKnowledge(t *testing.T) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Skip("curl not installed (Debian package curl)")
	}
	up := h2cUpstream(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, r.Proto) })
	tp := startProxy(t, up, limiter.Config{Mode: limiter.Unbounded}, nil)
	out, err := exec.Command(curl, "-sS", "-i", "--http2-prior-knowledge", "http://"+tp.addr+"/x").CombinedOutput()
	if err != nil {
		t.Fatalf("curl: %v\n%s", err, out)
	}
	if s := string(out); !strings.HasPrefix(s, "HTTP/2 200") || !strings.Contains(strings.ToLower(s), "server-timing: queue;dur=") || !strings.HasSuffix(s, "HTTP/2.0") {
		t.Errorf("curl got:\n%s", out)
	}
}

// TestH2CBodyLimit: a body over MaxBodyBytes is 413, declared or not.
func TestH2CBodyLimit(t *testing.T) {
	t.Parallel()
	up := h2cUpstream(t, func(w http.ResponseWriter, r *http.Request) { io.Copy(io.Discard, r.Body) })
	tp := startProxy(t, up, limiter.Config{Mode: limiter.Unbounded}, func(c *Config) { c.MaxBodyBytes = 1000 })
	c := h2cClient()
	for _, declared := range []bool{true, false} {
		var body io.Reader = strings.NewReader(strings.Repeat("x", 5000))
		if !declared {
			body = io.MultiReader(body) // length unknown
		}
		resp, err := c.Post("http://"+tp.addr+"/up", "text/plain", body)
		if err != nil {
			t.Fatalf("declared %v: %v", declared, err)
		}
		resp.Body.Close()
		if resp.StatusCode != 413 || resp.Header.Get("Loomgate-Outcome") != "bad_request" {
			t.Errorf("declared %v: %d %v; want 413 bad_request", declared, resp.StatusCode, resp.Header)
		}
	}
	tp.waitIdle(t)
}

// TestGRPCManyCallsOneConnection: of more calls than a connection may
// carry at once on one connection, h2c.MaxStreams reach admission and wait in
// its queue; the rest wait in the client, which opens them as others end.
// A connection could carry 10,000 streams: a client that granted them no
// window held hundreds of megabytes outside the memory bulkhead.
func TestGRPCManyCallsOneConnection(t *testing.T) {
	slow := &slowHealth{}
	const workers = 10
	tp := startProxy(t, grpcUpstream(t, slow), limiter.Config{Mode: limiter.Fixed, Workers: workers, QueueSize: 1000, QueueTimeout: 10 * time.Second}, nil)
	c := grpcClient(t, tp.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const calls = 400
	errs := make(chan error, calls)
	for range calls {
		go func() {
			_, err := c.Check(ctx, &healthpb.HealthCheckRequest{Service: "200ms"})
			errs <- err
		}()
	}
	deadline := time.Now().Add(5 * time.Second)
	for tp.limiter.Stats().Queued < h2c.MaxStreams-workers {
		if time.Now().After(deadline) {
			t.Fatalf("queued %d of %d calls; want %d, all the connection carries past the %d workers", tp.limiter.Stats().Queued, calls, h2c.MaxStreams-workers, workers)
		}
		time.Sleep(5 * time.Millisecond)
	}
	for range 20 {
		st := tp.limiter.Stats()
		if n := st.InFlight + st.Queued; n > h2c.MaxStreams {
			t.Fatalf("%d calls at admission; want at most the connection's %d streams", n, h2c.MaxStreams)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	for range calls {
		<-errs
	}
}

// lateAdmitter hands every waiting request its permit only once the
// request's context has ended: the worst timing of a permit freed as a
// queued stream is cancelled.
type lateAdmitter struct {
	limiter.Policy
	granted, released atomic.Int64
}

func (a *lateAdmitter) Admit(time.Time, *limiter.Request) error { return limiter.ErrMustWait }

func (a *lateAdmitter) Wait(ctx context.Context, _ *limiter.Request) error {
	<-ctx.Done()
	a.granted.Add(1)
	return nil
}

func (a *lateAdmitter) Leave(time.Time, *limiter.Request, int64) { a.released.Add(1) }

// TestH2CStreamCancelledAsItIsAdmittedNeverReachesTheUpstream: a stream
// whose client left (or whose deadline passed) while it waited is not
// forwarded when a permit comes at that moment: the permit goes back, and
// the request counts client_closed, not a service time of nothing.
func TestH2CStreamCancelledAsItIsAdmittedNeverReachesTheUpstream(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	up := h2cUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		io.WriteString(w, "ok")
	})
	adm := &lateAdmitter{}
	tp := startProxy(t, up, limiter.Config{Mode: limiter.Unbounded}, func(c *Config) { adm.Policy, c.Policy = c.Policy, adm })
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+tp.addr+"/left", nil)
	if resp, err := h2cClient().Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("the request was answered %d; want it cancelled by its client", resp.StatusCode)
	}
	o := tp.rec.wait(t, 1)[0]
	if o.Kind != ClientClosed || o.Admitted {
		t.Errorf("outcome %v, admitted %v; want client_closed, not admitted", o.Kind, o.Admitted)
	}
	if h := hits.Load(); h != 0 {
		t.Errorf("the upstream served %d requests; want none", h)
	}
	if g, r := adm.granted.Load(), adm.released.Load(); g != 1 || r != 1 {
		t.Errorf("%d permits granted, %d released; want the one back", g, r)
	}
}

// TestH2CStalledBodyIsTheClients: a plain HTTP/2 request whose body stops
// short of its declared length, the stream left open, is ended at
// BodyTimeout as on HTTP/1.1: 408, counted client_timeout, not a 504 at
// UpstreamTimeout blamed on the upstream that waited for the rest.
func TestH2CStalledBodyIsTheClients(t *testing.T) {
	t.Parallel()
	up := h2cUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, "ok")
	})
	tp := startProxy(t, up, limiter.Config{Mode: limiter.Unbounded}, func(c *Config) {
		c.BodyTimeout = 200 * time.Millisecond
		c.UpstreamTimeout = 10 * time.Second
		c.Logger = discardLogger()
	})
	pr, pw := io.Pipe()
	defer pw.Close()
	go pw.Write([]byte(strings.Repeat("x", 1000))) // then nothing
	req, _ := http.NewRequest("POST", "http://"+tp.addr+"/up", pr)
	req.ContentLength = 100000
	start := time.Now()
	resp, err := h2cClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 408 || resp.Header.Get("Loomgate-Outcome") != "client_timeout" {
		t.Errorf("stalled body: %d %v; want 408 client_timeout", resp.StatusCode, resp.Header)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("answered after %v; want about the 200ms body timeout, not the 10s upstream timeout", took)
	}
	if o := tp.rec.wait(t, 1)[0]; o.Kind != ClientTimeout {
		t.Errorf("counted %v; want client_timeout", o.Kind)
	}
	tp.waitIdle(t)
}

// TestGRPCStreamKeepsItsReservation: a gRPC stream gives its permit back
// at its first message, but not its bytes: the rest of the stream holds no
// worker, and still holds its buffers, which the memory bulkhead must see
// for as long as it lives: returned at its first message, the 10,000
// streams a connection may open could hold 0.7 GiB it never counted.
func TestGRPCStreamKeepsItsReservation(t *testing.T) {
	hs := health.NewServer()
	tp := startProxy(t, grpcUpstream(t, hs), limiter.Config{Mode: limiter.Fixed, Workers: 1, QueueSize: 10, QueueTimeout: time.Second},
		func(c *Config) { c.Reserve = RequestBytes })
	c := grpcClient(t, tp.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	w, err := c.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if m, err := w.Recv(); err != nil || m.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("Watch first = %v, %v", m, err)
	}
	// What the stream reserved at admission: 96 KiB for a request, and
	// 64 KiB for a body of unknown length, as a stream's is.
	const reserved = 96<<10 + 64<<10
	waitFor(t, func() bool { return tp.limiter.Stats().InFlight == 0 })
	if s := tp.limiter.Stats(); s.Bytes != reserved {
		t.Errorf("stream past its first message: %d bytes reserved; want its %d", s.Bytes, reserved)
	}
	// Its permit is free: a call beside it is served.
	if _, err := c.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("Check beside the stream = %v", err)
	}
	cancel()
	tp.waitIdle(t) // and its bytes come back at its end
}
