// Package health follows whether a sidecar's upstream answers: from every
// request's outcome, and from /readyz's own connects. It logs an upstream
// that fails, at most a line per 10 s with the count and the error, and a
// line when it answers again; it is what the status page shows of the
// upstream; and it says whether /readyz, following the upstream, fails.
package health

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/loomgate/loomgate/proxy"
)

// logEvery is the least time between two lines about requests the
// upstream failed: one that is down fails every request, thousands a
// second, and a line with their count says as much as a line each.
const logEvery = 10 * time.Second

// readyConnectTimeout bounds /readyz's own connect to the upstream: the
// kubelet gives up on a probe after 1 s by default (timeoutSeconds).
const readyConnectTimeout = 500 * time.Millisecond

// Health follows whether the upstream answers, from the requests'
// outcomes and from /readyz's connects. It logs a failing upstream, at
// most a line per logEvery with the count and the error, and a
// line when it answers again; it is what the status page shows; and it
// says whether /readyz, following the upstream, fails.
//
// Two things are followed apart. A failure spell runs from a request the
// upstream failed (upstream_error, or a connect that failed) to the next
// it answers: that is what the log and the status page report.
// Unreachability runs from a connect refused to the next that succeeds:
// only that fails /readyz, because a pod whose sidecar cannot connect to
// its service can serve nothing, while a service that answers 5xx, or
// resets, or is too busy to accept, is up: taking every pod out of the
// endpoints when a dependency they share fails would turn a partial
// outage into a whole one.
type Health struct {
	log      *slog.Logger
	upstream string // the URL, as the log names it
	addr     string // host:port, for /readyz's connect
	// follow is LOOMGATE_READY_FOLLOWS_UPSTREAM: how long connects must
	// have been refused for /readyz to fail; 0 = never.
	follow time.Duration

	// watch is set while an answer has something to end: a failure spell,
	// an unreachable upstream, or one never reached. Otherwise an answer,
	// most requests, costs one atomic load.
	watch atomic.Bool

	mu sync.Mutex
	// The failure spell; failingSince is zero outside one.
	failingSince time.Time
	failed       int64 // requests failed in the spell
	lastErr      error
	// connectOnly is set while every failure of the spell was a connect:
	// nothing listened, so a connect that succeeds ends the spell (with
	// the pod out of the endpoints, no request comes to end it).
	connectOnly bool
	warned      bool      // the spell has a line: its end gets one too
	unlogged    int64     // failures in no line yet, across spells
	lastLine    time.Time // of the last line about failures
	// Reachability. reached is set by the first connect or answer;
	// refusedSince is zero unless the last connect was refused.
	reached      bool
	refusedSince time.Time
	connectErr   error
	// notReady is /readyz's last verdict on the upstream, whose changes
	// are logged.
	notReady bool
}

// New follows upstream (LOOMGATE_UPSTREAM's URL), logging to log; follow
// is LOOMGATE_READY_FOLLOWS_UPSTREAM, 0 for a /readyz that never fails on
// the upstream's account.
func New(log *slog.Logger, upstream string, follow time.Duration) *Health {
	h := &Health{log: log, upstream: upstream, addr: upstreamAddr(upstream), follow: follow}
	// Never reached yet: the first answer sets reached.
	h.watch.Store(true)
	return h
}

// upstreamAddr is the host:port of a valid LOOMGATE_UPSTREAM.
func upstreamAddr(upstream string) string {
	u, err := url.Parse(upstream)
	if err != nil {
		return upstream
	}
	if u.Port() == "" {
		return net.JoinHostPort(u.Hostname(), "80")
	}
	return u.Host
}

// Observe takes one request's outcome. An answer, most requests, costs
// an atomic load; the rest is observeFailed's.
func (h *Health) Observe(o *proxy.Outcome) {
	switch {
	case o.Kind == proxy.UpstreamError || o.UpstreamErr != nil:
		h.observeFailed(o)
	case o.UpstreamStatus > 0 && h.watch.Load():
		h.answered(when(o))
	}
}

// observeFailed takes an outcome with an upstream's error. A function of its
// own: the variable errors.As needs escapes, and in Observe it would cost
// every request an allocation.
func (h *Health) observeFailed(o *proxy.Outcome) {
	var ce *proxy.ConnectError
	errors.As(o.UpstreamErr, &ce)
	switch {
	case o.Kind == proxy.UpstreamError || ce != nil:
		h.failure(when(o), o.UpstreamErr, ce)
	case o.UpstreamStatus > 0 && h.watch.Load():
		// A timeout once the upstream had answered: it was reached.
		h.answered(when(o))
	}
}

// when is the outcome's end, or now for a producer that read no clock.
func when(o *proxy.Outcome) time.Time {
	if o.End.IsZero() {
		return time.Now()
	}
	return o.End
}

// failure counts a request the upstream failed at t with err; ce is err's
// *proxy.ConnectError, nil when the upstream was reached.
func (h *Health) failure(t time.Time, err error, ce *proxy.ConnectError) {
	h.mu.Lock()
	if h.failingSince.IsZero() {
		h.failingSince, h.failed, h.connectOnly = t, 0, true
	}
	h.failed++
	h.unlogged++
	if err != nil {
		h.lastErr = err
	}
	h.connected(t, ce)
	if ce == nil {
		h.connectOnly = false
	}
	h.watch.Store(true)
	var line []any
	if h.lastLine.IsZero() || t.Sub(h.lastLine) >= logEvery {
		line = []any{"upstream", h.upstream, "failed", h.unlogged, "failing_for", t.Sub(h.failingSince).Round(time.Millisecond).String(), "err", errText(h.lastErr)}
		h.lastLine, h.unlogged, h.warned = t, 0, true
	}
	h.mu.Unlock()
	if line != nil {
		h.log.Warn("upstream failing: requests to it fail; one line per 10s at most, failed counts the requests since the last", line...)
	}
}

// connected notes, under mu, a connect at t that succeeded (ce nil) or
// failed with ce. Only a refusal counts towards /readyz: a connect that
// timed out is an upstream too busy to accept, or a host that drops
// packets, and neither is helped by this pod leaving the endpoints.
func (h *Health) connected(t time.Time, ce *proxy.ConnectError) {
	switch {
	case ce == nil:
		h.reached, h.refusedSince = true, time.Time{}
	case ce.TimedOut():
		h.connectErr = ce
	default:
		if h.refusedSince.IsZero() {
			h.refusedSince = t
		}
		h.connectErr = ce
	}
}

// answered notes a response of the upstream's at t: it ends a failure
// spell, and the upstream's unreachability.
func (h *Health) answered(t time.Time) {
	h.mu.Lock()
	h.connected(t, nil)
	line := h.endSpell(t)
	h.watch.Store(false)
	h.mu.Unlock()
	if line != nil {
		h.log.Info("upstream answers again", line...)
	}
}

// endSpell ends the failure spell, under mu, and returns the attributes
// of its last line, nil when the spell had none (its failures go in the
// next line).
func (h *Health) endSpell(t time.Time) []any {
	if h.failingSince.IsZero() {
		return nil
	}
	var line []any
	if h.warned {
		line = []any{"upstream", h.upstream, "failing_for", t.Sub(h.failingSince).Round(time.Millisecond).String(), "failed_total", h.failed}
	}
	h.failingSince, h.failed, h.warned, h.lastErr = time.Time{}, 0, false, nil
	return line
}

// Ready is /readyz's verdict on the upstream: with follow above 0, it
// connects to the upstream (and closes the connection) and fails once
// connects have been refused for follow, or while none ever succeeded.
// The connect is the probe's own: a pod out of the endpoints gets no
// request that would tell it the upstream is back.
func (h *Health) Ready(ctx context.Context) (bool, string) {
	if h.follow <= 0 {
		return true, ""
	}
	ctx, cancel := context.WithTimeout(ctx, readyConnectTimeout)
	defer cancel()
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", h.addr)
	var ce *proxy.ConnectError
	if err != nil {
		ce = &proxy.ConnectError{Err: err}
	} else {
		conn.Close()
	}
	now := time.Now()
	h.mu.Lock()
	h.connected(now, ce)
	var back []any
	if ce == nil && h.connectOnly {
		back = h.endSpell(now)
	}
	if ce != nil {
		h.watch.Store(true)
	}
	ok, why := h.verdict(now)
	reached := h.reached
	changed := ok == h.notReady
	h.notReady = !ok
	h.mu.Unlock()
	if back != nil {
		h.log.Info("upstream accepts connections again", back...)
	}
	switch {
	case changed && ok:
		h.log.Info("ready: the upstream accepts connections; /readyz answers 200", "upstream", h.upstream)
	case changed && !reached:
		h.log.Info("not ready until the upstream accepts a connection; /readyz answers 503", "upstream", h.upstream, "reason", why)
	case changed:
		h.log.Warn("not ready: /readyz answers 503 until the upstream accepts a connection", "upstream", h.upstream, "reason", why)
	}
	return ok, why
}

// verdict is /readyz's answer on the upstream at now, from what is known,
// under mu.
func (h *Health) verdict(now time.Time) (bool, string) {
	switch {
	case h.follow <= 0:
		return true, ""
	case !h.reached:
		return false, "upstream not reached yet: " + errText(h.connectErr)
	case !h.refusedSince.IsZero() && now.Sub(h.refusedSince) >= h.follow:
		return false, fmt.Sprintf("upstream refusing connections for %s: %s", now.Sub(h.refusedSince).Round(time.Second), errText(h.connectErr))
	}
	return true, ""
}

// State is what the status page shows of the upstream.
type State struct {
	FailingSince time.Time // zero while it answers
	Failed       int64
	Err          string
	// NotReady is why /readyz fails on the upstream's account, from the
	// last connects and answers, without a connect of its own; empty when
	// it passes, or before anything was tried.
	NotReady string
}

// State is what is known of the upstream now.
func (h *Health) State() State {
	h.mu.Lock()
	defer h.mu.Unlock()
	st := State{FailingSince: h.failingSince, Failed: h.failed}
	if ok, why := h.verdict(time.Now()); !ok && (h.reached || h.connectErr != nil) {
		st.NotReady = why
	}
	if !h.failingSince.IsZero() {
		st.Err = errText(h.lastErr)
	}
	return st
}

func errText(err error) string {
	if err == nil {
		return "unknown"
	}
	return err.Error()
}
