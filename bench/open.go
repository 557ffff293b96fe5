package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

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
	// a timeout, OpenTail after the window closes, so a run never outlasts
	// Warmup + Window by more than that.
	// If zero, 5 s.
	Timeout time.Duration

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

	// send, if set, replaces the HTTP request, so the pacer and the
	// accounting can be tested in a bubble of fake time.
	send func(deadline time.Time) answer
	// pause, if set, is called when request i is due, before it is handed
	// to a worker, so a test can make the rig itself late.
	pause func(i int64)
}

const (
	defaultOpenTimeout = 5 * time.Second

	// OpenTail is how long after the window's end the requests due in it
	// may still be answered.
	OpenTail = 5 * time.Second

	// LateAfter is how late a send may be and still count as on time.
	LateAfter = 10 * time.Millisecond
)

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

// answer is what one request came back with.
type answer struct {
	status     int
	retryAfter int64 // seconds, from a Retry-After header; -1 if none
	err        error
}

func (cfg OpenConfig) withDefaults() (OpenConfig, target, error) {
	var errs []error
	t, err := parseTarget(cfg.URL)
	if err != nil {
		errs = append(errs, err)
	}
	if !(cfg.Rate > 0) || cfg.Rate > maxRate {
		errs = append(errs, fmt.Errorf("%w: Rate %v: want a rate above 0 and at most %d requests per second", ErrConfig, cfg.Rate, maxRate))
	}
	if cfg.Warmup < 0 || cfg.Window < 0 || cfg.Timeout < 0 || cfg.MaxInFlight < 0 {
		errs = append(errs, fmt.Errorf("%w: Warmup %v, Window %v, Timeout %v, MaxInFlight %d: none may be negative",
			ErrConfig, cfg.Warmup, cfg.Window, cfg.Timeout, cfg.MaxInFlight))
	}
	if len(errs) > 0 {
		return cfg, t, errors.Join(errs...)
	}
	if cfg.Window == 0 {
		cfg.Window = defaultWindow
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = defaultOpenTimeout
	}
	if cfg.MaxInFlight == 0 {
		cfg.MaxInFlight = DefaultMaxInFlight()
	}
	if cfg.Label == "" {
		cfg.Label = fmtRate(cfg.Rate) + " rps"
	}
	return cfg, t, nil
}

// maxRate is far above what one process can send on loopback; a rate
// above it is a typo.
const maxRate = 1_000_000

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
	cfg, tgt, err := cfg.withDefaults()
	if err != nil {
		return OpenResult{}, err
	}
	if cfg.send == nil {
		conn, err := net.DialTimeout("tcp", tgt.addr, 5*time.Second)
		if err != nil {
			return OpenResult{}, fmt.Errorf("%w: %s: %v", ErrUnreachable, tgt.addr, err)
		}
		conn.Close()
	}
	var sc *scraper
	var baseline sample
	if cfg.AdminURL != "" {
		if sc, err = newScraper(cfg.AdminURL); err != nil {
			return OpenResult{}, err
		}
		if baseline, err = sc.scrape(); err != nil {
			return OpenResult{}, fmt.Errorf("%w: %s: %v", ErrAdmin, sc.url, err)
		}
	}
	if cfg.Progress != nil {
		fmt.Fprintf(cfg.Progress, "%s: %s rps on %s, at most %d in flight, warm-up %s, window %s\n",
			cfg.Label, fmtRate(cfg.Rate), cfg.URL, cfg.MaxInFlight, cfg.Warmup, cfg.Window)
	}

	begin := time.Now()
	r := newOpenRun(cfg, tgt, begin)
	defer r.closeIdle()

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		<-runCtx.Done()
		r.stop.Store(true)
		if ctx.Err() != nil {
			r.conns.abort()
		}
	}()

	var sidecar chan openSidecarResult
	if sc != nil {
		sidecar = make(chan openSidecarResult, 1)
		go func() { sidecar <- sc.watchRun(runCtx, begin, r.win, baseline) }()
	}
	progressDone := make(chan struct{})
	if cfg.Progress != nil {
		go func() {
			defer close(progressDone)
			r.progress(runCtx)
		}()
	} else {
		close(progressDone)
	}

	r.dispatch(runCtx)
	close(r.jobs)
	r.wg.Wait()
	// The scrapes end with the run: the last one sees the queue drained.
	cancel()
	<-progressDone

	res := r.result()
	if sidecar != nil {
		sr := <-sidecar
		if sr.err != nil && cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, "%s: reading %s: %v\n", cfg.Label, sc.url, sr.err)
		}
		res.Sidecar = sr.stats
	}
	if err := ctx.Err(); err != nil {
		return res, err
	}
	if cfg.Progress != nil {
		fmt.Fprintf(cfg.Progress, "%s: %s\n", cfg.Label, res.summary())
	}
	return res, nil
}

// openJob is one request on the schedule.
type openJob struct {
	i   int64
	due time.Time
}

// openRun is one level of open-loop load in progress.
type openRun struct {
	cfg  OpenConfig
	tgt  target
	pace pacer
	win  window
	// hardEnd is when every request still in flight is cut.
	hardEnd time.Time

	// jobs hands a due request to an idle worker. It is unbuffered, so a
	// send succeeds only if a worker is waiting: a request never sits in
	// a queue of the rig's own.
	jobs chan openJob
	wg   sync.WaitGroup

	// Only the dispatching goroutine touches these.
	workers          int
	dueWin, notSentW int64

	hc    *fasthttp.HostClient
	conns *connSet

	shards []*shard
	mu     sync.Mutex // guards recs, which grows as workers start
	recs   []*openRecorder

	stop atomic.Bool

	// Live counts for the progress line, window or not: sent as each
	// request goes out, the rest as it is answered.
	liveSent, liveOK, liveErr, liveNotSent atomic.Int64
	inFlight, peakInFlight                 atomic.Int64
}

func newOpenRun(cfg OpenConfig, tgt target, begin time.Time) *openRun {
	win := window{start: begin.Add(cfg.Warmup), end: begin.Add(cfg.Warmup + cfg.Window)}
	r := &openRun{
		cfg:     cfg,
		tgt:     tgt,
		pace:    pacer{start: begin, rate: cfg.Rate},
		win:     win,
		hardEnd: win.end.Add(OpenTail),
		jobs:    make(chan openJob),
		conns:   &connSet{open: map[*trackedConn]struct{}{}},
	}
	n := min(cfg.MaxInFlight, 2*runtimeProcs())
	r.shards = make([]*shard, 2*n)
	for i := range r.shards {
		r.shards[i] = &shard{h: newHistogram()}
	}
	if cfg.send == nil {
		r.hc = &fasthttp.HostClient{
			Addr:  tgt.addr,
			IsTLS: tgt.tls,
			Name:  "loomgate-bench",
			// As many connections as requests in flight, and no wait for
			// one: the cap is enforced, and counted, by the dispatcher.
			MaxConns:                  cfg.MaxInFlight,
			MaxIdemponentCallAttempts: 1,
			DialTimeout:               r.conns.dial,
		}
	}
	return r
}

func (r *openRun) closeIdle() {
	if r.hc != nil {
		r.hc.CloseIdleConnections()
	}
}

// pacerQuantum is the shortest sleep of the pacer. Above 1000 rps the
// requests due within a millisecond go out together when it wakes, up to
// a millisecond late (their latency still counts from when they were
// due), as wrk2's millisecond timers send them. A wake per request costs
// more than the request: on two cores, sleeping to each due time kept to
// schedule up to 10000 rps, this up to 18000.
const pacerQuantum = time.Millisecond

// dispatch walks the schedule until the window's end. When it wakes late
// it sends everything already due at once, as the arrivals would have
// come; each request still carries the time it was due.
func (r *openRun) dispatch(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for i := int64(0); !r.stop.Load(); i++ {
		due := r.pace.due(i)
		if !due.Before(r.win.end) {
			return
		}
		if d := time.Until(due); d > 0 {
			timer.Reset(max(d, pacerQuantum))
			select {
			case <-ctx.Done():
				return
			case <-timer.C:
			}
		}
		if r.cfg.pause != nil {
			r.cfg.pause(i)
		}
		r.handOff(openJob{i: i, due: due})
	}
}

// handOff gives j to an idle worker, or to a new one while fewer than
// MaxInFlight exist, or counts it as not sent.
func (r *openRun) handOff(j openJob) {
	inWin := r.win.contains(j.due)
	if inWin {
		r.dueWin++
	}
	select {
	case r.jobs <- j:
		return
	default:
	}
	if r.workers < r.cfg.MaxInFlight {
		r.workers++
		r.wg.Add(1)
		go r.worker(j)
		return
	}
	r.liveNotSent.Add(1)
	if inWin {
		r.notSentW++
	}
}

// worker sends j, then every job handed to it, one at a time.
func (r *openRun) worker(j openJob) {
	defer r.wg.Done()
	rec := r.newRecorder()
	send := r.cfg.send
	if send == nil {
		send = r.httpSender()
	}
	for {
		r.do(send, rec, j)
		var ok bool
		if j, ok = <-r.jobs; !ok {
			rec.flush()
			return
		}
	}
}

func (r *openRun) do(send func(time.Time) answer, rec *openRecorder, j openJob) {
	n := r.inFlight.Add(1)
	for p := r.peakInFlight.Load(); n > p && !r.peakInFlight.CompareAndSwap(p, n); p = r.peakInFlight.Load() {
	}
	sent := time.Now()
	r.liveSent.Add(1)
	deadline := j.due.Add(r.cfg.Timeout)
	if deadline.After(r.hardEnd) {
		deadline = r.hardEnd
	}
	a := send(deadline)
	done := time.Now()
	r.inFlight.Add(-1)

	switch k := classify(a.err, a.status); {
	case errors.Is(a.err, fasthttp.ErrNoFreeConns):
		r.liveSent.Add(-1)
		r.liveNotSent.Add(1)
	case k == kindOK:
		r.liveOK.Add(1)
	default:
		r.liveErr.Add(1)
	}
	rec.record(j.due, sent, done, a)
}

// httpSender returns a worker's own request: its request and response
// objects are reused for every job it takes.
func (r *openRun) httpSender() func(time.Time) answer {
	req, resp := new(fasthttp.Request), new(fasthttp.Response)
	req.SetRequestURI(r.tgt.raw)
	req.Header.SetMethod(fasthttp.MethodGet)
	return func(deadline time.Time) answer {
		a := answer{retryAfter: -1}
		a.err = r.hc.DoDeadline(req, resp, deadline)
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

func (r *openRun) newRecorder() *openRecorder {
	r.mu.Lock()
	defer r.mu.Unlock()
	i := len(r.recs)
	half := len(r.shards) / 2
	rec := &openRecorder{
		win:      r.win,
		latency:  r.shards[i%half],
		lag:      r.shards[half+i%half],
		retryFor: map[int64]int64{},
	}
	r.recs = append(r.recs, rec)
	return rec
}

// progress writes a line a second while the schedule runs.
func (r *openRun) progress(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	begin := r.pace.start
	var lastSent, lastOK int64
	lastAt := begin
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			if !now.Before(r.win.end) {
				return
			}
			sent, ok := r.liveSent.Load(), r.liveOK.Load()
			secs := now.Sub(lastAt).Seconds()
			phase := fmt.Sprintf("warm-up %.0fs/%s", now.Sub(begin).Seconds(), r.cfg.Warmup)
			if !now.Before(r.win.start) {
				phase = fmt.Sprintf("window %.0fs/%s", now.Sub(r.win.start).Seconds(), r.cfg.Window)
			}
			fmt.Fprintf(r.cfg.Progress, "%s: %s, sent %.0f/s, 2xx %.0f/s, in flight %d, %d not 2xx, %d not sent\n",
				r.cfg.Label, phase, float64(sent-lastSent)/secs, float64(ok-lastOK)/secs,
				r.inFlight.Load(), r.liveErr.Load(), r.liveNotSent.Load())
			lastSent, lastOK, lastAt = sent, ok, now
		}
	}
}

// connSet keeps the rig's connections, so that an abandoned run can close
// them under the requests in flight.
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
