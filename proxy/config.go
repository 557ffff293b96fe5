package proxy

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/loomgate/loomgate/field"
	"github.com/loomgate/loomgate/internal/admission"
	"github.com/loomgate/loomgate/limiter"
	"github.com/loomgate/loomgate/route"
)

// Observer receives each request's Outcome once, after its response.
// Observe is called concurrently and on the request's path: it must be quick.
type Observer = admission.Observer

// Sizes that bound what one request can hold in the proxy's memory.
const (
	// MaxHeaderBytes bounds a request's line and headers; beyond it the
	// answer is 431. Tomcat's maxHttpHeaderSize has the same default.
	MaxHeaderBytes = 8 << 10
	// RequestPrefetchBytes is how much of a request body fasthttp reads
	// before the handler runs; the rest streams to the upstream.
	RequestPrefetchBytes = 8 << 10
	// ResponseBufferBytes is the largest response body read whole before it
	// is sent on: the upstream's time is then exact in Server-Timing, and a
	// failure mid-body still gets a clean 502. Larger bodies stream.
	ResponseBufferBytes = 64 << 10
	// MaxBodyLimit is the largest Config.MaxBodyBytes: 2 GiB. A body
	// larger than that belongs in object storage, not in a request held
	// through admission.
	MaxBodyLimit = 2 << 30
)

// Config describes a Proxy.
type Config struct {
	// Upstream is the service's address as http://host:port. Required.
	Upstream string
	// Policy admits requests, whatever their protocol: a *limiter.Limiter,
	// or a *limiter.DryRun. Required.
	Policy limiter.Policy
	// Observer receives each request's Outcome. If nil, outcomes are dropped.
	Observer Observer
	// Classes sorts requests into route classes, once each, as they meet
	// admission: the Outcome's Class. If nil, automatically (method and
	// first path segment; see route.Parse).
	Classes *route.Classes
	// Priorities gives each request its priority level and flow at
	// admission, for a Policy that admits by them. If zero, none.
	Priorities admission.Priorities
	// UpstreamTimeout bounds an admitted request from admission to the
	// upstream's last response byte, and the writing of its response (a
	// client that reads it slower is cut off, counted ClientTimeout). If
	// zero, 60s.
	UpstreamTimeout time.Duration
	// MaxBodyBytes is the largest request body accepted; a larger one is
	// answered 413 without reaching the upstream. If zero, 16 MiB.
	MaxBodyBytes int64
	// HeaderTimeout bounds the reading of a request's line, headers and
	// first 8 KiB of body, from its first byte: a client that takes longer
	// gets 408 and its connection is closed, before it meets admission.
	// With "Expect: 100-continue" the body is asked for once the request is
	// admitted, and its first 8 KiB get as long again from the 100. A new
	// connection that sends nothing for this long is closed without an
	// answer. If zero, 10s.
	HeaderTimeout time.Duration
	// BodyTimeout bounds each pause in the rest of a request body, which
	// streams to the upstream after admission: a client that sends nothing
	// for this long gets 408, counted ClientTimeout, and its permit is
	// released. UpstreamTimeout bounds the whole upload too. If zero, 10s.
	BodyTimeout time.Duration
	// MaxConns caps connections to the upstream. Set it to the admission
	// limit: a smaller pool would be a second, unmeasured queue. If zero,
	// connections are not capped.
	MaxConns int
	// MaxClientConns bounds the client connections open at once; at the
	// bound new connections wait in the listener's backlog until one
	// closes. Size it so that the descriptors left serve the upstream
	// connections and the admin listener. If zero, unbounded.
	MaxClientConns int
	// ServerTiming adds the Server-Timing header to every response.
	ServerTiming bool
	// RejectStatus answers a rejection by admission: 503 or 429. Clients
	// that honour 429 with Retry-After (Kubernetes clients, many SDKs)
	// back off on it, where a 503 may read as the service failing. If
	// zero, 503.
	RejectStatus int
	// RetryAfter returns the delay a rejected client is told to wait, for
	// the Retry-After header; it is rounded up to whole seconds, at least 1.
	// If nil, 1 second.
	RetryAfter func(Kind) time.Duration
	// Reserve returns the bytes a request reserves from the Policy, given
	// its declared body length (-1 when unknown); RequestBytes is the
	// proxy's own measure. If nil, 0. Independently of it, a response body
	// the proxy buffers is charged when its headers arrive.
	Reserve func(contentLength int) int64
	// MaxUpgraded bounds the upgraded connections (WebSocket) open at
	// once; a handshake beyond it is answered like a rejection, counted
	// RejectedUpgraded. If zero, unbounded. See upgrade.go.
	MaxUpgraded int
	// UpgradedIdleTimeout closes an upgraded connection that carried no
	// byte either way for this long. If zero, never.
	UpgradedIdleTimeout time.Duration
	// UpgradedClosed, if set, is told of each upgraded connection's end.
	UpgradedClosed func(Upgraded)
	// Logger receives the process log. If nil, slog.Default().
	Logger *slog.Logger
}

// ParseUpstream checks an upstream address and returns the host:port to
// dial. It accepts exactly what the proxy can honour: plain HTTP to one
// host and port. A path prefix would have to be rewritten into every
// request, which the proxy deliberately does not do (targets are forwarded
// byte for byte).
func ParseUpstream(raw string) (addr string, err error) {
	u, err := url.Parse(raw)
	switch {
	case raw == "":
		return "", errors.New("is empty")
	case err != nil:
		return "", errors.New("is not a URL")
	case u.Scheme != "http":
		return "", errors.New("is not an http:// URL")
	case u.Hostname() == "":
		return "", errors.New("has no host")
	case u.User != nil:
		return "", errors.New("has user information, which is not supported")
	case u.Path != "" && u.Path != "/", u.RawQuery != "", u.ForceQuery, u.Fragment != "", u.Opaque != "":
		return "", errors.New("has a path, query or fragment, which are not supported")
	}
	port := u.Port()
	if port == "" {
		return net.JoinHostPort(u.Hostname(), "80"), nil
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "", fmt.Errorf("has port %s; want 1 to 65535", port)
	}
	return u.Host, nil
}

// Validate reports every problem of cfg as *field.Error values joined,
// or nil.
func (cfg Config) Validate() error {
	var problems []error
	bad := func(name, problem string) {
		problems = append(problems, &field.Error{Part: "proxy", Field: name, Problem: problem})
	}
	if _, err := ParseUpstream(cfg.Upstream); err != nil {
		bad("Upstream", err.Error())
	}
	if cfg.Policy == nil {
		bad("Policy", "is nil")
	}
	for _, d := range []struct {
		field string
		v     time.Duration
	}{{"UpstreamTimeout", cfg.UpstreamTimeout}, {"HeaderTimeout", cfg.HeaderTimeout}, {"BodyTimeout", cfg.BodyTimeout}} {
		if d.v < 0 {
			bad(d.field, fmt.Sprintf("is %v; want 0 (the default) or more", d.v))
		}
	}
	if cfg.MaxBodyBytes < 0 || cfg.MaxBodyBytes > MaxBodyLimit {
		bad("MaxBodyBytes", fmt.Sprintf("is %d; want 0 (the default) to %d (2 GiB)", cfg.MaxBodyBytes, MaxBodyLimit))
	}
	if cfg.RejectStatus != 0 && cfg.RejectStatus != fasthttp.StatusServiceUnavailable && cfg.RejectStatus != fasthttp.StatusTooManyRequests {
		bad("RejectStatus", fmt.Sprintf("is %d; want 503 or 429", cfg.RejectStatus))
	}
	if cfg.MaxConns < 0 {
		bad("MaxConns", fmt.Sprintf("is %d; want 0 (no cap) or more", cfg.MaxConns))
	}
	if cfg.MaxClientConns < 0 {
		bad("MaxClientConns", fmt.Sprintf("is %d; want 0 (no bound) or more", cfg.MaxClientConns))
	}
	if cfg.MaxUpgraded < 0 {
		bad("MaxUpgraded", fmt.Sprintf("is %d; want 0 (no bound) or more", cfg.MaxUpgraded))
	}
	if cfg.UpgradedIdleTimeout < 0 {
		bad("UpgradedIdleTimeout", fmt.Sprintf("is %v; want 0 (none) or more", cfg.UpgradedIdleTimeout))
	}
	return errors.Join(problems...)
}
