package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

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
	// there, whatever Timeout says, so a run never outlasts Warmup + Window
	// by more than a scrape.
	// If zero, 30 s.
	Timeout time.Duration

	// AdminURL, if set, is a loomgate sidecar's admin listener (its base
	// URL, or its /metrics URL). Its metrics are read before, during and
	// after the window to fill Result.Sidecar.
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
}

const (
	defaultWindow  = 10 * time.Second
	defaultTimeout = 30 * time.Second
)

// target is a validated Config.URL.
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

func (cfg Config) withDefaults() (Config, target, error) {
	var errs []error
	t, err := parseTarget(cfg.URL)
	if err != nil {
		errs = append(errs, err)
	}
	if cfg.Concurrency < 1 {
		errs = append(errs, fmt.Errorf("%w: Concurrency %d: want at least 1 virtual user", ErrConfig, cfg.Concurrency))
	}
	if cfg.Warmup < 0 || cfg.Window < 0 || cfg.Timeout < 0 {
		errs = append(errs, fmt.Errorf("%w: Warmup %v, Window %v, Timeout %v: none may be negative", ErrConfig, cfg.Warmup, cfg.Window, cfg.Timeout))
	}
	if len(errs) > 0 {
		return cfg, t, errors.Join(errs...)
	}
	if cfg.Window == 0 {
		cfg.Window = defaultWindow
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = defaultTimeout
	}
	if cfg.Label == "" {
		cfg.Label = fmt.Sprintf("c%d", cfg.Concurrency)
	}
	return cfg, t, nil
}

// Run drives cfg.URL with cfg.Concurrency virtual users for cfg.Warmup and
// then cfg.Window, and returns what was measured in the window. It returns
// early, with ctx's error, if ctx ends.
func Run(ctx context.Context, cfg Config) (Result, error) {
	cfg, tgt, err := cfg.withDefaults()
	if err != nil {
		return Result{}, err
	}

	// A mistyped URL should cost a second, not a whole window of connect
	// errors; a bare TCP connect probes without sending a request.
	conn, err := net.DialTimeout("tcp", tgt.addr, 5*time.Second)
	if err != nil {
		return Result{}, fmt.Errorf("%w: %s: %v", ErrUnreachable, tgt.addr, err)
	}
	conn.Close()

	var sc *scraper
	if cfg.AdminURL != "" {
		if sc, err = newScraper(cfg.AdminURL); err != nil {
			return Result{}, err
		}
		if _, err := sc.scrape(); err != nil {
			return Result{}, fmt.Errorf("%w: %s: %v", ErrAdmin, sc.url, err)
		}
	}

	if cfg.Progress != nil {
		fmt.Fprintf(cfg.Progress, "%s: %d users on %s, warm-up %s, window %s\n", cfg.Label, cfg.Concurrency, cfg.URL, cfg.Warmup, cfg.Window)
	}
	begin := time.Now()
	win := window{start: begin.Add(cfg.Warmup), end: begin.Add(cfg.Warmup + cfg.Window)}
	t := newTally(win, cfg.Concurrency)

	workers := make([]*worker, cfg.Concurrency)
	for i := range workers {
		workers[i] = newWorker(tgt, cfg.Timeout, t.recorder(i))
	}
	defer func() {
		// Keep-alive connections would otherwise linger, idle, against
		// the target until fasthttp's cleaner closes them seconds later.
		for _, w := range workers {
			w.hc.CloseIdleConnections()
		}
	}()

	// Workers poll an atomic flag rather than ctx.Err(), which may take a
	// lock, on every request.
	var stop atomic.Bool
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		<-runCtx.Done()
		stop.Store(true)
		if ctx.Err() != nil {
			// Abandoned: requests in flight are not waited for.
			for _, w := range workers {
				w.abort()
			}
		}
	}()

	var sidecar chan sidecarResult
	if sc != nil {
		sidecar = make(chan sidecarResult, 1)
		go func() { sidecar <- sc.watchWindow(runCtx, begin, win) }()
	}
	var upstream chan rssResult
	if cfg.UpstreamRSS != nil {
		upstream = make(chan rssResult, 1)
		go func() { upstream <- peakRSS(runCtx, begin, win, cfg.UpstreamRSS) }()
	}
	progressDone := make(chan struct{})
	if cfg.Progress != nil {
		go func() {
			defer close(progressDone)
			progress(runCtx, cfg, win, t)
		}()
	} else {
		close(progressDone)
	}

	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Go(func() { w.loop(&stop) })
	}
	wg.Wait()

	res := t.result()
	res.URL = cfg.URL
	res.Arm = tgt.label
	res.Concurrency = cfg.Concurrency
	if sidecar != nil {
		sr := <-sidecar
		if sr.err != nil && cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, "%s: reading %s: %v\n", cfg.Label, sc.url, sr.err)
		}
		res.Sidecar = sr.stats
	}
	if upstream != nil {
		ur := <-upstream
		if ur.err != nil && cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, "%s: reading the upstream's memory: %v\n", cfg.Label, ur.err)
		}
		res.UpstreamMemoryBytes = ur.peak
	}
	cancel()
	<-progressDone
	if err := ctx.Err(); err != nil {
		return res, err
	}
	res.Physics = res.physics(cfg.Capacity).Check()
	if cfg.Progress != nil {
		fmt.Fprintf(cfg.Progress, "%s: %s\n", cfg.Label, res.summary())
	}
	return res, nil
}

// progress writes a line a second: where the level is and the throughput
// of the last second, successes only.
func progress(ctx context.Context, cfg Config, win window, t *tally) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	begin := win.start.Add(-cfg.Warmup)
	last, lastAt := int64(0), begin
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			if !now.Before(win.end) {
				return
			}
			ok, errs := t.live()
			rps := float64(ok-last) / now.Sub(lastAt).Seconds()
			last, lastAt = ok, now
			phase := fmt.Sprintf("warm-up %.0fs/%s", now.Sub(begin).Seconds(), cfg.Warmup)
			if !now.Before(win.start) {
				phase = fmt.Sprintf("window %.0fs/%s", now.Sub(win.start).Seconds(), cfg.Window)
			}
			fmt.Fprintf(cfg.Progress, "%s: %s, %.0f rps, %d errors\n", cfg.Label, phase, rps, errs)
		}
	}
}

// worker is one virtual user: a loop of requests on its own connection.
type worker struct {
	hc      *fasthttp.HostClient
	req     *fasthttp.Request
	resp    *fasthttp.Response
	timeout time.Duration
	rec     *recorder

	// mu guards conn and aborted, touched only when a connection is
	// opened and when the run is abandoned, never per request.
	mu      sync.Mutex
	conn    net.Conn
	aborted bool
}

func newWorker(t target, timeout time.Duration, rec *recorder) *worker {
	req := new(fasthttp.Request)
	req.SetRequestURI(t.raw)
	req.Header.SetMethod(fasthttp.MethodGet)
	w := &worker{
		req:     req,
		resp:    new(fasthttp.Response),
		timeout: timeout,
		rec:     rec,
	}
	w.hc = &fasthttp.HostClient{
		Addr:  t.addr,
		IsTLS: t.tls,
		Name:  "loomgate-bench",
		// One connection per virtual user, as a real client has: C users
		// hold C connections, so the target sees C concurrent requests
		// and not however many a shared pool happens to open.
		MaxConns: 1,
		// A retry would hide an error and count one request twice.
		MaxIdemponentCallAttempts: 1,
		DialTimeout:               w.dial,
	}
	return w
}

var errAborted = errors.New("run abandoned")

// dial opens the user's connection and keeps hold of it, so that abort can
// close it under a request that would otherwise block until its deadline.
func (w *worker) dial(addr string, timeout time.Duration) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.aborted {
		c.Close()
		return nil, errAborted
	}
	w.conn = c
	return c, nil
}

// abort closes the user's connection: the request in flight, if any, fails
// at once instead of running to its deadline.
func (w *worker) abort() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.aborted = true
	if w.conn != nil {
		w.conn.Close()
	}
}

// connectPause is how long a virtual user waits after failing to connect.
// A refused dial fails in microseconds: without a pause, C users would spin
// the cores the target and the rig need, counting errors.
const connectPause = 10 * time.Millisecond

func (w *worker) loop(stop *atomic.Bool) {
	end := w.rec.win.end
	for !stop.Load() && w.once(end) {
	}
}

// once sends one request, records it, and reports whether there is time
// for another before end.
func (w *worker) once(end time.Time) bool {
	sent := time.Now()
	if !sent.Before(end) {
		return false
	}
	// fasthttp cannot cancel a call once made, so the only way to stop at
	// the window's end is a deadline fixed before the call. A request cut
	// there completes after the window and is not counted anyway.
	deadline := sent.Add(w.timeout)
	if deadline.After(end) {
		deadline = end
	}
	err := w.hc.DoDeadline(w.req, w.resp, deadline)
	done := time.Now()
	k := classify(err, w.resp.StatusCode())
	w.rec.record(sent, done, k)
	if k == kindConnect {
		if pause := min(connectPause, end.Sub(done)); pause > 0 {
			time.Sleep(pause)
		}
	}
	return done.Before(end)
}

// kind is what became of one request.
type kind uint8

const (
	kindOK      kind = iota // a 2xx response
	kindStatus              // any other response
	kindTimeout             // no response before the deadline
	kindConnect             // the connection failed: refused, reset, closed
)

func classify(err error, status int) kind {
	if err == nil {
		if status >= 200 && status < 300 {
			return kindOK
		}
		return kindStatus
	}
	if errors.Is(err, fasthttp.ErrTimeout) {
		return kindTimeout
	}
	// A dial that timed out never reached the server: a connect error.
	if errors.Is(err, fasthttp.ErrDialTimeout) {
		return kindConnect
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			return kindConnect
		}
		return kindTimeout
	}
	return kindConnect
}
