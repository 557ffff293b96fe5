package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/loomgate/loomgate/lab/bench/scrape"
	"github.com/valyala/fasthttp"
)

// One load engine drives every run. It opens the connections, sends each
// request with a deadline, records it (record.go), reads the sidecar and
// the upstream's memory over the run (scrape.go) and writes the progress
// lines. What differs between a closed and an open loop is only the
// pacing: when each request is sent.
//
//   - closed: C clients, each on its own connection, each sending its next
//     request when the previous answer arrives. A request is due when it
//     is sent, and belongs to the window if it completes in it.
//   - open: request i is due at start + i / rate (the pacer's schedule),
//     sent then on an idle connection or a new one whatever became of the
//     ones before it, and belongs to the window if it is due in it.

var (
	// ErrConfig is returned, wrapped with the field at fault, for a Config
	// that cannot be run.
	ErrConfig = errors.New("bench: invalid config")

	// ErrUnreachable is returned when no connection to the target can be
	// opened before the load starts.
	ErrUnreachable = errors.New("bench: target unreachable")

	// ErrAdmin is returned when Config.AdminURL does not answer with
	// Prometheus metrics before the load starts.
	ErrAdmin = errors.New("bench: admin endpoint unusable")
)

// Config describes one level of closed-loop load.
type Config struct {
	// URL is requested with GET by every virtual user, e.g.
	// http://127.0.0.1:8080/wait?ms=200. It must be http or https.
	URL string

	// Concurrency is the number of virtual users, each with its own
	// connection. It must be at least 1.
	Concurrency int

	// Warmup is how long the load runs before the window opens, so that
	// connections are open and queues have reached their steady length.
	// If zero, the window opens at once.
	Warmup time.Duration

	// Window is how long requests are counted for.
	// If zero, 10 s.
	Window time.Duration

	// Timeout bounds each request; one that takes longer is counted as a
	// timeout error. Requests still in flight when the window closes are cut
	// there (over h2c and gRPC a scrape later), whatever Timeout says, so a
	// run never outlasts Warmup + Window by more than a scrape.
	// If zero, 30 s.
	Timeout time.Duration

	// AdminURL, if set, is a loomgate sidecar's admin listener (its base
	// URL, or its /metrics URL). Its metrics are read when the window
	// opens, during it and when it closes to fill Result.Sidecar.
	// If empty, Result.Sidecar is nil.
	AdminURL string

	// UpstreamRSS, if set, reads the resident memory of the upstream's
	// process, in bytes. It is read when the window opens, during it and
	// when it closes, as AdminURL is, and the highest reading is
	// Result.UpstreamMemoryBytes.
	// If nil, Result.UpstreamMemoryBytes is 0.
	UpstreamRSS func() (int64, error)

	// Progress, if set, receives a line a second while the level runs and a
	// summary line at its end.
	// If nil, Run is silent.
	Progress io.Writer

	// Capacity, if set, is a limit behind the target that no sidecar
	// reports, such as the service's connection pool; the physics check
	// takes it as the ceiling. If zero, the sidecar's limit is used, if any.
	Capacity Capacity

	// Label starts each progress line, e.g. "[3/12] fixed 200 c500".
	// If empty, "c" and the concurrency.
	Label string

	// Flows, if set, spreads the virtual users over paths of URL's host,
	// Flows[i].Clients of them on Flows[i].Path, in place of Concurrency
	// users on URL; Result.Concurrency is their sum.
	Flows []Flow

	// ErrorPause is how long a virtual user waits, after an answer that is
	// not 2xx or a request that failed, before it sends again. If zero,
	// only a failed connection makes it wait (10 ms): any answer, even a
	// 503, is followed by the next request at once.
	ErrorPause time.Duration

	// Proto is the protocol spoken. With H2C or GRPC the virtual users'
	// requests are streams on Conns shared connections, not one
	// connection each.
	// If empty, HTTP/1.1.
	Proto Proto

	// Conns is how many connections an H2C or GRPC run opens; each user
	// sends on one of them, in turn. A target that allows fewer streams
	// on a connection than it is given (Go's servers allow 250 unless
	// told otherwise; loomgate and the stub 10000) makes the rest wait
	// in the rig, and the wait counts in their latency. It must be zero
	// for HTTP/1.1.
	// If zero, DefaultConns.
	Conns int

	// Header, if set, is sent with every request, e.g. a tenant's id for
	// a sidecar that queues flows by it (LOOMGATE_FLOW_KEY). HTTP/1.1
	// only.
	Header map[string]string
}

// Flow is closed-loop clients on one path.
type Flow struct {
	// Path is requested on the target's host, e.g. "/wait?ms=100".
	Path    string
	Clients int
}

// OpenConfig describes one level of open-loop load: requests sent at a
// constant rate, each on its schedule whether or not the ones before it
// were answered.
type OpenConfig struct {
	// URL is requested with GET, e.g. http://127.0.0.1:8080/wait?ms=200.
	// It must be http or https.
	URL string

	// Rate is the intended arrival rate, in requests per second: request i
	// is due i / Rate seconds after the load starts. It must be positive.
	Rate float64

	// Warmup is how long the load runs before the window opens.
	// If zero, the window opens at once.
	Warmup time.Duration

	// Window is the measurement window: the requests due in it are the
	// ones counted, each followed to its answer, its timeout, or the
	// run's end.
	// If zero, 10 s.
	Window time.Duration

	// Timeout bounds each request from the time it was due, not from the
	// time it was sent. Whatever it says, a request is cut, and counted as
	// a timeout, Tail after the window closes, so a run never outlasts
	// Warmup + Window by more than that.
	// If zero, 5 s.
	Timeout time.Duration

	// Tail is how long after the window's end the requests due in it may
	// still be answered: behind a queue that grows, longer than its wait.
	// If zero, OpenTail.
	Tail time.Duration

	// MaxInFlight caps the requests in flight, and so the connections the
	// rig holds: a request due while that many are in flight is not sent,
	// and is counted as not sent.
	// If zero, DefaultMaxInFlight().
	MaxInFlight int

	// AdminURL, if set, is a loomgate sidecar's admin listener. Its
	// metrics are read from the start of the load to the end of the run to
	// fill OpenResult.Sidecar.
	// If empty, OpenResult.Sidecar is nil.
	AdminURL string

	// Progress, if set, receives a line a second and a summary line.
	// If nil, RunOpen is silent.
	Progress io.Writer

	// Label starts each progress line, e.g. "[2/6] open fixed 200 1200 rps".
	// If empty, the rate.
	Label string

	// Proto and Conns are as in Config: with H2C or GRPC, requests are
	// streams on Conns shared connections, and MaxInFlight caps the
	// streams.
	Proto Proto
	Conns int

	// send, if set, replaces the HTTP request, so the pacer and the
	// accounting can be tested in a bubble of fake time.
	send func(deadline time.Time) answer
	// pause, if set, is called when request i is due, before it is handed
	// to a worker, so a test can make the rig itself late.
	pause func(i int64)
}

const (
	defaultWindow      = 10 * time.Second
	defaultTimeout     = 30 * time.Second
	defaultOpenTimeout = 5 * time.Second

	// OpenTail is how long after the window's end the requests due in it
	// may still be answered.
	OpenTail = 5 * time.Second

	// LateAfter is how late a send may be and still count as on time.
	LateAfter = 10 * time.Millisecond
)

// maxRate is far above what one process can send on loopback; a rate
// above it is a typo.
const maxRate = 1_000_000

// DescriptorsPerRequest is what one request proxied through an in-process
// sidecar to an in-process stub costs in open files: the rig's connection,
// the sidecar's client side, the sidecar's upstream connection and the
// stub's side.
const DescriptorsPerRequest = 4

// DefaultMaxInFlight is the default cap on the requests an open-loop run
// holds in flight: a sixth of the process's open-file limit, so that rig,
// sidecar and stub in one process, at DescriptorsPerRequest each, keep a
// third of the limit for listeners, scrapes and the runtime. With the limit
// of 20000 it is 3333.
func DefaultMaxInFlight() int {
	return max(openFileLimit()/(DescriptorsPerRequest+2), 16)
}

// fallbackFileLimit is assumed where the open-file limit cannot be read.
const fallbackFileLimit = 1024

// target is a validated URL.
type target struct {
	addr  string // host:port to dial
	tls   bool
	raw   string
	label string // host and path, for results without an arm
}

func parseTarget(raw string) (target, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return target{}, fmt.Errorf("%w: URL %q: want an http:// or https:// URL, e.g. http://127.0.0.1:8080/wait?ms=200", ErrConfig, raw)
	}
	if u.Hostname() == "" {
		return target{}, fmt.Errorf("%w: URL %q: no host", ErrConfig, raw)
	}
	port := u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "https" {
			port = "443"
		}
	}
	return target{
		addr:  net.JoinHostPort(u.Hostname(), port),
		tls:   u.Scheme == "https",
		raw:   raw,
		label: u.Host + u.RequestURI(),
	}, nil
}

// level is one run of the engine, as either Config says it.
type level struct {
	url, admin     string
	upstreamRSS    func() (int64, error)
	warmup, window time.Duration
	timeout, tail  time.Duration
	label, start   string // start is the progress stream's first line
	progress       io.Writer
	send           func(time.Time) answer
	pace           pacing
	proto          Proto
	header         map[string]string // on every HTTP/1.1 request
	conns          int               // with a multiplexed proto
	closedSidecar  bool              // read the sidecar over the window only
	// liveLine is the progress line's figures for the last secs seconds.
	liveLine func(e *engine, phase string, secs float64) string
}

// pacing is when the engine sends: closedPacing or openPacing.
type pacing interface {
	// clients is the most connections the pacing opens at once.
	clients() int
	// byDue reports whether requests belong to the window by their due
	// time rather than by their completion.
	byDue() bool
	// drive sends requests until the window's end.
	drive(ctx context.Context, e *engine)
}

// engine is one level of load in progress.
type engine struct {
	lv    level
	tgt   target
	begin time.Time
	win   window
	// hardEnd is when every request still in flight is cut.
	hardEnd time.Time
	tally   *tally
	conns   *connSet

	mu      sync.Mutex // guards clients
	clients []*fasthttp.HostClient
	// streams are the shared connections of an h2c or gRPC run, nil
	// over HTTP/1.1.
	streams *streams

	stop atomic.Bool

	// Live counts for the progress line, window or not: sent as each
	// request goes out, the rest as it is answered.
	liveSent, liveNotSent  atomic.Int64
	inFlight, peakInFlight atomic.Int64
}

// watched is what was read beside the load.
type watched struct {
	sidecar     *scrape.SidecarStats
	openSidecar *scrape.OpenSidecar
	upstream    int64
}

// execute runs lv and returns the engine, for its tally, and what was read
// beside it; errors in reading are written to the progress stream.
func execute(ctx context.Context, lv level) (*engine, watched, error) {
	tgt, err := parseTarget(lv.url)
	if err != nil {
		return nil, watched{}, err
	}
	if lv.send == nil {
		// A mistyped URL should cost a second, not a whole window of
		// connect errors; a bare TCP connect probes without sending a
		// request.
		conn, err := net.DialTimeout("tcp", tgt.addr, 5*time.Second)
		if err != nil {
			return nil, watched{}, fmt.Errorf("%w: %s: %v", ErrUnreachable, tgt.addr, err)
		}
		conn.Close()
	}
	var sc *scrape.Scraper
	var baseline scrape.Sample
	if lv.admin != "" {
		if sc, err = scrape.New(lv.admin); err != nil {
			return nil, watched{}, fmt.Errorf("%w: %v", ErrConfig, err)
		}
		if baseline, err = sc.Read(); err != nil {
			return nil, watched{}, fmt.Errorf("%w: %s: %v", ErrAdmin, sc.URL(), err)
		}
	}
	say(lv.progress, "%s: %s", lv.label, lv.start)

	begin := time.Now()
	win := window{start: begin.Add(lv.warmup), end: begin.Add(lv.warmup + lv.window)}
	e := &engine{
		lv: lv, tgt: tgt, begin: begin, win: win, hardEnd: win.end.Add(lv.tail),
		tally: newTally(win, lv.pace.byDue(), lv.pace.clients()),
		conns: &connSet{open: map[*trackedConn]struct{}{}},
	}
	defer func() {
		// Keep-alive connections would otherwise linger, idle, against
		// the target until fasthttp's cleaner closes them seconds later.
		for _, hc := range e.clients {
			hc.CloseIdleConnections()
		}
	}()
	if lv.proto.multiplexed() && lv.send == nil {
		if e.streams, err = newStreams(tgt, lv.proto, lv.conns, e.conns.dial); err != nil {
			return nil, watched{}, err
		}
		defer e.streams.close()
	}

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		<-runCtx.Done()
		e.stop.Store(true)
		if ctx.Err() != nil {
			// Abandoned: requests in flight are not waited for.
			e.conns.abort()
		}
	}()

	// Readings over the window end with it; readings over the run end
	// with the run, the last one after it.
	var inWindow, afterRun []func()
	var w watched
	sw := scrape.Window{Start: win.start, End: win.end}
	if sc != nil {
		errc := make(chan error, 1)
		collect := func() {
			if err := <-errc; err != nil {
				say(lv.progress, "%s: reading %s: %v", lv.label, sc.URL(), err)
			}
		}
		if lv.closedSidecar {
			go func() {
				var err error
				w.sidecar, err = sc.OverWindow(runCtx, begin, sw)
				errc <- err
			}()
			inWindow = append(inWindow, collect)
		} else {
			go func() {
				var err error
				w.openSidecar, err = sc.OverRun(runCtx, begin, sw, baseline)
				errc <- err
			}()
			afterRun = append(afterRun, collect)
		}
	}
	if lv.upstreamRSS != nil {
		errc := make(chan error, 1)
		go func() {
			var err error
			w.upstream, err = scrape.PeakRSS(runCtx, begin, sw, lv.upstreamRSS)
			errc <- err
		}()
		inWindow = append(inWindow, func() {
			if err := <-errc; err != nil {
				say(lv.progress, "%s: reading the upstream's memory: %v", lv.label, err)
			}
		})
	}
	progressDone := make(chan struct{})
	if lv.progress != nil {
		go func() {
			defer close(progressDone)
			e.progressLines(runCtx)
		}()
	} else {
		close(progressDone)
	}

	lv.pace.drive(runCtx, e)
	for _, collect := range inWindow {
		collect()
	}
	cancel()
	<-progressDone
	for _, collect := range afterRun {
		collect()
	}
	return e, w, ctx.Err()
}

// say writes a line to w, if there is one.
func say(w io.Writer, format string, args ...any) {
	if w != nil {
		fmt.Fprintf(w, format+"\n", args...)
	}
}

// progressLines writes a line a second while the load runs: where it is,
// and the pacing's live figures.
func (e *engine) progressLines(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	lastAt := e.begin
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			if !now.Before(e.win.end) {
				return
			}
			phase := fmt.Sprintf("warm-up %.0fs/%s", now.Sub(e.begin).Seconds(), e.lv.warmup)
			if !now.Before(e.win.start) {
				phase = fmt.Sprintf("window %.0fs/%s", now.Sub(e.win.start).Seconds(), e.lv.window)
			}
			fmt.Fprintf(e.lv.progress, "%s: %s\n", e.lv.label, e.lv.liveLine(e, phase, now.Sub(lastAt).Seconds()))
			lastAt = now
		}
	}
}

// newClient is an HTTP client to the target with at most conns
// connections, each dialled through the engine's connSet. A retry would
// hide an error and count one request twice.
func (e *engine) newClient(conns int) *fasthttp.HostClient {
	hc := &fasthttp.HostClient{
		Addr:                      e.tgt.addr,
		IsTLS:                     e.tgt.tls,
		Name:                      "loomgate-bench",
		MaxConns:                  conns,
		MaxIdemponentCallAttempts: 1,
		DialTimeout:               e.conns.dial,
	}
	e.mu.Lock()
	e.clients = append(e.clients, hc)
	e.mu.Unlock()
	return hc
}

// userSender is what a closed-loop user sends for uri: its own
// connection over HTTP/1.1, the next shared one over h2c and gRPC.
func (e *engine) userSender(uri string) func(time.Time) answer {
	if e.streams != nil {
		return e.streams.sender(uri)
	}
	return e.sender(e.newClient(1), uri)
}

// workerSenders returns what makes an open-loop worker's sender: over
// HTTP/1.1 all workers share one client of up to maxInFlight
// connections, over h2c and gRPC the shared connections.
func (e *engine) workerSenders(maxInFlight int) func() func(time.Time) answer {
	if e.streams != nil {
		return func() func(time.Time) answer { return e.streams.sender(e.tgt.raw) }
	}
	hc := e.newClient(maxInFlight)
	return func() func(time.Time) answer { return e.sender(hc, e.tgt.raw) }
}

// sender returns a client's own request for uri on hc, or the test's: its
// request and response objects are reused for every request it sends.
func (e *engine) sender(hc *fasthttp.HostClient, uri string) func(time.Time) answer {
	if e.lv.send != nil {
		return e.lv.send
	}
	req, resp := new(fasthttp.Request), new(fasthttp.Response)
	req.SetRequestURI(uri)
	req.Header.SetMethod(fasthttp.MethodGet)
	for k, v := range e.lv.header {
		req.Header.Set(k, v)
	}
	return func(deadline time.Time) answer {
		a := answer{retryAfter: -1}
		a.err = hc.DoDeadline(req, resp, deadline)
		if a.err == nil {
			a.status = resp.StatusCode()
			if v := resp.Header.Peek("Retry-After"); len(v) > 0 {
				if s, err := strconv.ParseInt(string(v), 10, 64); err == nil && s >= 0 {
					a.retryAfter = s
				}
			}
		}
		return a
	}
}

// do sends one request due at due, with a deadline of its timeout from
// then, or the run's hard end, and records it.
func (e *engine) do(send func(time.Time) answer, rec *recorder, due time.Time) (done time.Time, a answer) {
	n := e.inFlight.Add(1)
	for p := e.peakInFlight.Load(); n > p && !e.peakInFlight.CompareAndSwap(p, n); p = e.peakInFlight.Load() {
	}
	sent := time.Now()
	e.liveSent.Add(1)
	// fasthttp cannot cancel a call once made, so the only way to stop at
	// the run's end is a deadline fixed before the call.
	deadline := due.Add(e.lv.timeout)
	if deadline.After(e.hardEnd) {
		deadline = e.hardEnd
	}
	a = send(deadline)
	done = time.Now()
	e.inFlight.Add(-1)
	if errors.Is(a.err, fasthttp.ErrNoFreeConns) {
		e.liveSent.Add(-1)
		e.liveNotSent.Add(1)
	}
	rec.record(due, sent, done, a)
	return done, a
}

var errAborted = errors.New("run abandoned")

// connSet keeps the rig's connections, so that an abandoned run can close
// them under the requests in flight instead of waiting for their
// deadlines.
type connSet struct {
	mu      sync.Mutex
	open    map[*trackedConn]struct{}
	aborted bool
}

type trackedConn struct {
	net.Conn
	set  *connSet
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.set.mu.Lock()
		delete(c.set.open, c)
		c.set.mu.Unlock()
	})
	return c.Conn.Close()
}

func (s *connSet) dial(addr string, timeout time.Duration) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.aborted {
		c.Close()
		return nil, errAborted
	}
	tc := &trackedConn{Conn: c, set: s}
	s.open[tc] = struct{}{}
	return tc, nil
}

func (s *connSet) abort() {
	s.mu.Lock()
	s.aborted = true
	conns := make([]*trackedConn, 0, len(s.open))
	for c := range s.open {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

// Run drives cfg.URL with cfg.Concurrency virtual users for cfg.Warmup and
// then cfg.Window, and returns what was measured in the window. It returns
// early, with ctx's error, if ctx ends.
func Run(ctx context.Context, cfg Config) (Result, error) {
	var errs []error
	if _, err := parseTarget(cfg.URL); err != nil {
		errs = append(errs, err)
	}
	uris, err := clientURIs(cfg)
	if err != nil {
		errs = append(errs, err)
	}
	conns, err := checkProto(cfg.Proto, cfg.Conns)
	if err == nil {
		err = checkURIs(cfg.Proto, uris...)
	}
	if err != nil {
		errs = append(errs, err)
	}
	if len(cfg.Header) > 0 && cfg.Proto != "" && cfg.Proto != HTTP1 {
		errs = append(errs, fmt.Errorf("%w: Header is sent over HTTP/1.1 only, not %s", ErrConfig, cfg.Proto))
	}
	if cfg.Warmup < 0 || cfg.Window < 0 || cfg.Timeout < 0 || cfg.ErrorPause < 0 {
		errs = append(errs, fmt.Errorf("%w: Warmup %v, Window %v, Timeout %v, ErrorPause %v: none may be negative",
			ErrConfig, cfg.Warmup, cfg.Window, cfg.Timeout, cfg.ErrorPause))
	}
	if len(errs) > 0 {
		return Result{}, errors.Join(errs...)
	}
	cfg.Concurrency = len(uris)
	cfg.Window = cmp.Or(cfg.Window, defaultWindow)
	cfg.Timeout = cmp.Or(cfg.Timeout, defaultTimeout)
	cfg.Label = cmp.Or(cfg.Label, fmt.Sprintf("c%d", cfg.Concurrency))
	lv := level{
		url: cfg.URL, admin: cfg.AdminURL, upstreamRSS: cfg.UpstreamRSS,
		warmup: cfg.Warmup, window: cfg.Window, timeout: cfg.Timeout,
		label: cfg.Label, progress: cfg.Progress,
		start: fmt.Sprintf("%d users on %s%s, warm-up %s, window %s",
			cfg.Concurrency, cfg.URL, overWhat(cfg.Proto, conns), cfg.Warmup, cfg.Window),
		pace:   closedPacing{uris: uris, errorPause: cfg.ErrorPause},
		header: cfg.Header,
		// HTTP/2 cancels a stream the moment its request is cut, and
		// loomgate ends it then: the requests in service would count a
		// fraction of their service time, and those queued behind them
		// none, in the window's last reading of the sidecar. Cut a
		// scrape later, they end after it. (An HTTP/1.1 request cut by
		// closing its connection runs to its end in the sidecar.)
		tail:          closedTail(cfg.Proto),
		proto:         cfg.Proto,
		conns:         conns,
		closedSidecar: true,
		liveLine:      closedLine(),
	}
	e, w, err := execute(ctx, lv)
	if e == nil {
		return Result{}, err
	}
	res := e.tally.result()
	res.URL, res.Arm, res.Concurrency = cfg.URL, e.tgt.label+overWhat(cfg.Proto, conns), cfg.Concurrency
	res.Sidecar, res.UpstreamMemoryBytes = w.sidecar, w.upstream
	if err != nil {
		return res, err
	}
	res.Physics = res.PhysicsFor(cfg.Capacity).Check()
	say(cfg.Progress, "%s: %s", cfg.Label, res.summary())
	return res, nil
}

// RunOpen sends GET cfg.URL at cfg.Rate for cfg.Warmup and then cfg.Window,
// and returns what became of the requests due in the window. It returns
// early, with ctx's error, if ctx ends.
//
// Latency is measured from the time each request was due, so a stall of
// the target, or of the rig, shows in every request it delayed and not in
// one (the coordinated omission of a closed loop). A request is never held
// back for a connection: it goes out on an idle one or a new one, up to
// cfg.MaxInFlight, and past that it is counted as not sent.
func RunOpen(ctx context.Context, cfg OpenConfig) (OpenResult, error) {
	var errs []error
	if _, err := parseTarget(cfg.URL); err != nil {
		errs = append(errs, err)
	}
	conns, err := checkProto(cfg.Proto, cfg.Conns)
	if err == nil {
		err = checkURIs(cfg.Proto, cfg.URL)
	}
	if err != nil {
		errs = append(errs, err)
	}
	if !(cfg.Rate > 0) || cfg.Rate > maxRate {
		errs = append(errs, fmt.Errorf("%w: Rate %v: want a rate above 0 and at most %d requests per second", ErrConfig, cfg.Rate, maxRate))
	}
	if cfg.Warmup < 0 || cfg.Window < 0 || cfg.Timeout < 0 || cfg.Tail < 0 || cfg.MaxInFlight < 0 {
		errs = append(errs, fmt.Errorf("%w: Warmup %v, Window %v, Timeout %v, Tail %v, MaxInFlight %d: none may be negative",
			ErrConfig, cfg.Warmup, cfg.Window, cfg.Timeout, cfg.Tail, cfg.MaxInFlight))
	}
	if len(errs) > 0 {
		return OpenResult{}, errors.Join(errs...)
	}
	cfg.Window = cmp.Or(cfg.Window, defaultWindow)
	cfg.Timeout = cmp.Or(cfg.Timeout, defaultOpenTimeout)
	cfg.MaxInFlight = cmp.Or(cfg.MaxInFlight, DefaultMaxInFlight())
	cfg.Label = cmp.Or(cfg.Label, fmtRate(cfg.Rate)+" rps")
	op := &openPacing{rate: cfg.Rate, maxInFlight: cfg.MaxInFlight, pause: cfg.pause}
	lv := level{
		url: cfg.URL, admin: cfg.AdminURL,
		warmup: cfg.Warmup, window: cfg.Window, timeout: cfg.Timeout, tail: cmp.Or(cfg.Tail, OpenTail),
		label: cfg.Label, progress: cfg.Progress, send: cfg.send,
		start: fmt.Sprintf("%s rps on %s%s, at most %d in flight, warm-up %s, window %s",
			fmtRate(cfg.Rate), cfg.URL, overWhat(cfg.Proto, conns), cfg.MaxInFlight, cfg.Warmup, cfg.Window),
		pace:     op,
		proto:    cfg.Proto,
		conns:    conns,
		liveLine: openLine(),
	}
	e, w, err := execute(ctx, lv)
	if e == nil {
		return OpenResult{}, err
	}
	res := e.tally.openResult()
	res.URL, res.Arm, res.Rate, res.MaxInFlight = cfg.URL, e.tgt.label+overWhat(cfg.Proto, conns), cfg.Rate, cfg.MaxInFlight
	res.Due, res.PeakInFlight = op.dueWin, int(e.peakInFlight.Load())
	res.Counts.NotSent += op.notSentWin
	res.Sidecar = w.openSidecar
	if err != nil {
		return res, err
	}
	say(cfg.Progress, "%s: %s", cfg.Label, res.summary())
	return res, nil
}

// closedTail is how long past a closed loop's window its requests in
// flight may run.
func closedTail(p Proto) time.Duration {
	if p.multiplexed() {
		return scrape.Every
	}
	return 0
}

// clientURIs is the request URI of each of cfg's virtual users.
func clientURIs(cfg Config) ([]string, error) {
	if len(cfg.Flows) == 0 {
		if cfg.Concurrency < 1 {
			return nil, fmt.Errorf("%w: Concurrency %d: want at least 1 virtual user", ErrConfig, cfg.Concurrency)
		}
		uris := make([]string, cfg.Concurrency)
		for i := range uris {
			uris[i] = cfg.URL
		}
		return uris, nil
	}
	u, err := url.Parse(cfg.URL)
	if err != nil {
		return nil, nil // parseTarget says why
	}
	var uris []string
	for _, f := range cfg.Flows {
		if f.Clients < 1 || !strings.HasPrefix(f.Path, "/") {
			return nil, fmt.Errorf("%w: Flow %+v: want at least 1 client on a path starting with /", ErrConfig, f)
		}
		for range f.Clients {
			uris = append(uris, u.Scheme+"://"+u.Host+f.Path)
		}
	}
	return uris, nil
}
