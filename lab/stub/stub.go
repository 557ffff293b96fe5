package stub

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"
	"golang.org/x/sync/semaphore"

	"github.com/loomgate/loomgate/internal/sniff"
)

// ErrConfig is returned, wrapped with the field at fault, by New for a Config
// it cannot serve with.
var ErrConfig = errors.New("stub: invalid config")

// Config describes a stub. The zero value is a stub with ten /db connections
// and no hidden pool.
type Config struct {
	// DBPool is the number of connections /db requests share; a request
	// waits FIFO for one and holds it for its ms.
	// If zero, 10: with /db?ms=200 that caps throughput at 10 / 0.2 s = 50 rps.
	DBPool int

	// Pool, if positive, is the size of a hidden worker pool every request
	// except /metrics waits FIFO for before it is served, like a servlet
	// container's thread pool.
	// If zero, there is none: every request is served at once on its own
	// goroutine.
	Pool int

	// Concurrency is the most connections served at once; more are refused.
	// If zero, 100000: a sleeping request costs a goroutine, and experiments
	// hold thousands of them.
	Concurrency int

	// Forward, if set (host:port), makes the stub no upstream at all but
	// the barest fasthttp reverse proxy to Forward: every request goes
	// through fasthttp's HostClient.Do, with no limit, no timeout and no
	// measurement. It is the floor against which the overhead scenario
	// reads what loomgate's own work costs over fasthttp's.
	Forward string

	// ErrorLog receives errors the server meets on connections (not the
	// frequent resets and timeouts, which fasthttp leaves out).
	// If nil, the log package's standard logger is used.
	ErrorLog *log.Logger
}

const defaultDBPool = 10

const defaultConcurrency = 100_000

// route is an endpoint of the stub; it indexes the per-path request counters
// so the hot path never looks a label up.
type route int

const (
	routeOther route = iota
	routeWait
	routeCPU
	routeDB
	routeMem
	routePinned
	routeMixed
	routeWS
	routeMetrics
	routePool
	numRoutes
)

// routeLabels are the values of the path label: a fixed set, whatever paths
// clients try. /metrics is not counted.
var routeLabels = [numRoutes]string{
	routeOther:  "other",
	routeWait:   "/wait",
	routeCPU:    "/cpu",
	routeDB:     "/db",
	routeMem:    "/mem",
	routePinned: "/pinned",
	routeMixed:  "/mixed",
	routeWS:     "/ws",
}

func routeOf(path []byte) route {
	// The compiler turns a switch on string(path) into comparisons on the
	// bytes, without converting.
	switch string(path) {
	case "/wait":
		return routeWait
	case "/cpu":
		return routeCPU
	case "/db":
		return routeDB
	case "/mem":
		return routeMem
	case "/pinned":
		return routePinned
	case "/mixed":
		return routeMixed
	case "/ws":
		return routeWS
	case "/metrics":
		return routeMetrics
	case "/pool":
		return routePool
	}
	return routeOther
}

// occupancy counts the holders and waiters of one of the stub's pools.
type occupancy struct {
	inUse   atomic.Int64
	waiting atomic.Int64
	peak    atomic.Int64 // highest inUse since New
}

// Server is a running stub. Create it with New, then call Serve.
type Server struct {
	srv *fasthttp.Server

	db   *semaphore.Weighted
	pool *workers // nil without Config.Pool
	// pinned is the global critical section behind /pinned.
	pinned sync.Mutex

	// ctx bounds the waits for db and pool: it is cancelled when Shutdown
	// gives up, so that waiters answer 503 rather than outlive the server.
	ctx    context.Context
	cancel context.CancelFunc

	// mu orders Serve and Shutdown: fasthttp's shutdown returns at once
	// when Serve has not yet registered its listener, which would then
	// accept forever; the listener is closed here whichever comes first.
	mu       sync.Mutex
	ln       *onceCloseListener
	stopping bool

	inFlight  atomic.Int64
	dbOcc     occupancy
	poolOcc   occupancy
	memHeld   atomic.Int64 // bytes held by /mem requests in flight
	pinnedOcc occupancy

	// requests holds the children of loomgate_stub_requests_total, one
	// per route, resolved once so that counting is a single atomic add.
	requests [numRoutes]prometheus.Counter
	reg      *prometheus.Registry
	metrics  fasthttp.RequestHandler
	// protocols serves /ws and gRPC; nil for a forwarding stub.
	protocols *protocols

	dbSize int
}

// New returns a stub configured by cfg, ready to Serve.
func New(cfg Config) (*Server, error) {
	var errs []error
	if cfg.DBPool < 0 {
		errs = append(errs, fmt.Errorf("%w: DBPool %d: want 0 (default %d) or more", ErrConfig, cfg.DBPool, defaultDBPool))
	}
	if cfg.Pool < 0 {
		errs = append(errs, fmt.Errorf("%w: Pool %d: want 0 (no pool) or more", ErrConfig, cfg.Pool))
	}
	if cfg.Concurrency < 0 {
		errs = append(errs, fmt.Errorf("%w: Concurrency %d: want 0 (default %d) or more", ErrConfig, cfg.Concurrency, defaultConcurrency))
	}
	if cfg.Forward != "" {
		if _, _, err := net.SplitHostPort(cfg.Forward); err != nil {
			errs = append(errs, fmt.Errorf("%w: Forward %q: want host:port", ErrConfig, cfg.Forward))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if cfg.DBPool == 0 {
		cfg.DBPool = defaultDBPool
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = defaultConcurrency
	}

	s := &Server{
		db:     semaphore.NewWeighted(int64(cfg.DBPool)),
		dbSize: cfg.DBPool,
	}
	if cfg.Pool > 0 {
		s.pool = newWorkers(cfg.Pool)
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.metrics = s.metricsHandler()

	var logger fasthttp.Logger
	if cfg.ErrorLog != nil {
		logger = cfg.ErrorLog
	}
	handler := s.handle
	if cfg.Forward != "" {
		handler = forwarder(cfg.Forward)
	} else {
		s.protocols = s.newProtocols()
	}
	s.srv = &fasthttp.Server{
		Handler:     handler,
		Name:        "loomgate-stub",
		Concurrency: cfg.Concurrency,
		Logger:      logger,
		// Idle keep-alive connections are closed by Shutdown itself; no
		// read or idle timeout, so a request held for minutes is never cut.
		CloseOnShutdown: true,
	}
	return s, nil
}

// Serve accepts connections on ln and serves them until Shutdown. It returns
// nil after Shutdown.
func (s *Server) Serve(ln net.Listener) error {
	l := &onceCloseListener{Listener: ln}
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		l.Close()
		return nil
	}
	s.ln = l
	s.mu.Unlock()
	if s.protocols != nil {
		// HTTP/2 connections (gRPC) go to the gRPC server, the rest to
		// fasthttp as they came.
		return s.srv.Serve(sniff.New(l, s.protocols.serveH2, 0, nil))
	}
	return s.srv.Serve(l)
}

// Shutdown stops accepting connections and waits for the requests in flight
// to finish, or for ctx to end. Requests still waiting for a /db connection or
// a pool worker when ctx ends are answered 503; requests already sleeping run
// to the end of their ms in the background.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.stopping = true
	ln := s.ln
	s.mu.Unlock()
	if ln != nil {
		ln.Close()
	}
	if s.protocols != nil {
		defer s.protocols.shutdown(ctx)
	}
	err := s.srv.ShutdownWithContext(ctx)
	s.cancel()
	return err
}

// onceCloseListener closes once, so that Shutdown and fasthttp may both
// close it; fasthttp reads the closed listener's error as the end of Serve.
type onceCloseListener struct {
	net.Listener
	once sync.Once
	err  error
}

func (l *onceCloseListener) Close() error {
	l.once.Do(func() { l.err = l.Listener.Close() })
	return l.err
}

// forwarder is Config.Forward's handler: fasthttp's own proxying, as its
// documentation shows it, and nothing more.
func forwarder(addr string) fasthttp.RequestHandler {
	hc := &fasthttp.HostClient{Addr: addr, MaxConns: defaultConcurrency}
	return func(ctx *fasthttp.RequestCtx) {
		if err := hc.Do(&ctx.Request, &ctx.Response); err != nil {
			ctx.Error("bad gateway", fasthttp.StatusBadGateway)
		}
	}
}

func (s *Server) handle(ctx *fasthttp.RequestCtx) {
	r := routeOf(ctx.Path())
	switch r {
	case routeMetrics:
		s.metrics(ctx)
		return
	case routePool:
		s.resize(ctx)
		return
	case routeWS:
		if s.protocols != nil {
			s.requests[routeWS].Inc()
			s.protocols.ws(ctx)
			return
		}
	case routeOther:
		s.requests[routeOther].Inc()
		ctx.Error("not found: the stub serves /wait?ms=N, /cpu?iters=N, /db?ms=N, /mem?kb=N&ms=M, /pinned?ms=N, /mixed, /ws (WebSocket echo), /pool?size=N, gRPC and /metrics\n", fasthttp.StatusNotFound)
		return
	}
	s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	defer s.requests[r].Inc()

	// Parameters are checked before any pool is waited for: a malformed
	// request is answered at once and never takes a worker.
	n, ms, bad := parseQuery(r, ctx.QueryArgs())
	if bad != "" {
		ctx.Error(bad, fasthttp.StatusBadRequest)
		return
	}

	if s.pool != nil {
		if !s.acquire(ctx, s.pool, &s.poolOcc) {
			return
		}
		defer release(s.pool, &s.poolOcc)
	}

	var buf [96]byte
	out := buf[:0]
	switch r {
	case routeWait:
		sleepMillis(ms)
		out = appendMillis(append(out, "waited "...), ms)
	case routeCPU:
		out = append(out, "cpu iters="...)
		out = strconv.AppendInt(out, n, 10)
		out = append(out, " result="...)
		out = strconv.AppendUint(out, cpuWork(n), 10)
		out = append(out, '\n')
	case routeDB:
		if !s.acquire(ctx, s.db, &s.dbOcc) {
			return
		}
		sleepMillis(ms)
		release(s.db, &s.dbOcc)
		out = appendMillis(append(out, "held a db connection "...), ms)
	case routeMem:
		sum := s.holdMemory(n, ms)
		out = append(out, "held "...)
		out = strconv.AppendInt(out, n, 10)
		out = append(out, " KiB for "...)
		out = strconv.AppendInt(out, ms, 10)
		out = append(out, " ms sum="...)
		out = strconv.AppendUint(out, sum, 10)
		out = append(out, '\n')
	case routePinned:
		s.pinned.Lock()
		raise(&s.pinnedOcc.peak, s.pinnedOcc.inUse.Add(1))
		sleepMillis(ms)
		s.pinnedOcc.inUse.Add(-1)
		s.pinned.Unlock()
		out = appendMillis(append(out, "pinned "...), ms)
	case routeMixed:
		// An order service: look the order up, call a payment API, write
		// the result. Three blocking steps, 200 ms in all.
		sleepMillis(15)
		sleepMillis(180)
		sleepMillis(5)
		out = append(out, "mixed 15+180+5 ms\n"...)
	}
	ctx.Response.AppendBody(out)
}

func appendMillis(out []byte, ms int64) []byte {
	out = strconv.AppendInt(out, ms, 10)
	return append(out, " ms\n"...)
}

// acquire waits FIFO for one permit of sem (x/sync's semaphore serves
// waiters in order), keeping occ up to date. If the stub is shut down
// meanwhile it answers 503 and reports false.
func (s *Server) acquire(ctx *fasthttp.RequestCtx, sem permits, occ *occupancy) bool {
	occ.waiting.Add(1)
	err := sem.Acquire(s.ctx, 1)
	occ.waiting.Add(-1)
	if err != nil {
		ctx.Error("stub shutting down\n", fasthttp.StatusServiceUnavailable)
		return false
	}
	raise(&occ.peak, occ.inUse.Add(1))
	return true
}

func release(sem permits, occ *occupancy) {
	// inUse drops before the permit is handed on, so the next holder's
	// increment can never make inUse, or its peak, exceed the pool size.
	occ.inUse.Add(-1)
	sem.Release(1)
}

// permits is what the /db connections and the hidden pool both are.
type permits interface {
	Acquire(ctx context.Context, n int64) error
	Release(n int64)
}

// resize is /pool?size=N: the hidden pool gets N workers from now on, so
// that an experiment can change the upstream's capacity mid-run. It never
// waits for a worker itself.
func (s *Server) resize(ctx *fasthttp.RequestCtx) {
	if s.pool == nil {
		ctx.Error("no hidden pool to resize: start the stub with a pool (--pool N)\n", fasthttp.StatusConflict)
		return
	}
	raw := ctx.QueryArgs().Peek(paramSize.name)
	n, err := parseUint(raw, paramSize.max)
	if raw == nil {
		err = errMissing
	}
	if err != nil || n < 1 {
		if err == nil {
			err = errNotWhole
		}
		ctx.Error(badParam(paramSize, raw, err), fasthttp.StatusBadRequest)
		return
	}
	s.pool.Resize(int(n))
	ctx.Response.AppendBody(strconv.AppendInt(append([]byte(nil), "pool "...), n, 10))
	ctx.Response.AppendBodyString("\n")
}

// raise lifts peak to v if v is higher.
func raise(peak *atomic.Int64, v int64) {
	for {
		p := peak.Load()
		if v <= p || peak.CompareAndSwap(p, v) {
			return
		}
	}
}

func sleepMillis(ms int64) {
	if ms > 0 {
		time.Sleep(time.Duration(ms) * time.Millisecond)
	}
}

// cpuWork runs n rounds of xorshift64*. Each round depends on the previous
// one, so the loop can be neither vectorised nor skipped, and its cost is
// linear in n.
func cpuWork(n int64) uint64 {
	x := uint64(0x9E3779B97F4A7C15)
	for i := int64(0); i < n; i++ {
		x ^= x >> 12
		x ^= x << 25
		x ^= x >> 27
		x *= 0x2545F4914F6CDD1D
	}
	return x
}

// pageSize is the stride at which /mem writes: one byte per page is enough
// to make the kernel back the whole buffer with memory.
const pageSize = 4096

// holdMemory allocates kb KiB, writes to every page of it and keeps it for
// ms. It returns a sum over the pages so the buffer is live until the end.
func (s *Server) holdMemory(kb, ms int64) uint64 {
	size := kb << 10
	// Large allocations come straight from fresh, zeroed pages the kernel has
	// not backed yet: without the writes the memory would be reserved but not
	// resident, and the experiment would see nothing.
	buf := make([]byte, size)
	for i := int64(0); i < size; i += pageSize {
		buf[i] = byte(i>>12) | 1
	}
	s.memHeld.Add(size)
	sleepMillis(ms)
	var sum uint64
	for i := int64(0); i < size; i += pageSize {
		sum += uint64(buf[i])
	}
	s.memHeld.Add(-size)
	return sum
}
