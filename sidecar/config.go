package sidecar

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/loomgate/loomgate/advice"
	"github.com/loomgate/loomgate/field"
	"github.com/loomgate/loomgate/limiter"
	"github.com/loomgate/loomgate/proxy"
	"github.com/loomgate/loomgate/route"
	"github.com/loomgate/loomgate/series"
)

// Config is the sidecar's whole configuration. Its tags are the single
// source for the LOOMGATE_* variables: env names the variable (after the
// prefix), envDefault its default, help says what it does, accepts what a
// valid value looks like, and mode the admission modes it belongs to (in
// the other modes it is checked as strictly, and inactive).
type Config struct {
	Listen               string              `env:"LISTEN" envDefault:":8080" help:"traffic listener" accepts:"host:port, e.g. :8080"`
	AdminListen          string              `env:"ADMIN_LISTEN" envDefault:":9090" help:"admin listener: metrics, health, advice, status page; never subject to admission" accepts:"host:port, e.g. :9090, on a port LOOMGATE_LISTEN does not take (on the same address, or either on every address)"`
	Upstream             string              `env:"UPSTREAM" envDefault:"http://127.0.0.1:8081" help:"the service behind the sidecar" accepts:"http://host:port with no path, query or user, port 1 to 65535"`
	Mode                 limiter.Mode        `env:"MODE" envDefault:"unbounded" help:"admission policy: fixed, unbounded, or adaptive (open until the upstream queues inside, then a limit that follows its capacity)" accepts:"fixed, unbounded or adaptive"`
	Workers              int                 `mode:"fixed" env:"WORKERS" envDefault:"200" help:"fixed: requests served at once" accepts:"a whole number from 1 to 1000000"`
	QueueSize            int                 `mode:"fixed,adaptive" env:"QUEUE_SIZE" envDefault:"10000" help:"fixed, adaptive: waiters allowed in the queue; more are rejected at once" accepts:"a whole number from 0 to 1000000 (0 = reject when all workers are busy)"`
	QueueTimeout         time.Duration       `mode:"fixed,adaptive" env:"QUEUE_TIMEOUT" envDefault:"30s" help:"fixed, adaptive: longest wait in the queue before rejection" accepts:"a duration with a unit, e.g. 30s or 250ms, above 0"`
	QueuePolicy          limiter.QueuePolicy `mode:"fixed,adaptive" env:"QUEUE_POLICY" envDefault:"fifo" help:"fixed, adaptive: fifo, or codel: under sustained overload (the queue not empty for QUEUE_INTERVAL) reject waits past QUEUE_TARGET and serve the newest first" accepts:"fifo or codel"`
	QueueTarget          time.Duration       `mode:"fixed,adaptive" env:"QUEUE_TARGET" envDefault:"5ms" help:"codel: longest queue time under sustained overload" accepts:"a duration with a unit, e.g. 5ms, above 0 and below LOOMGATE_QUEUE_TIMEOUT"`
	QueueInterval        time.Duration       `mode:"fixed,adaptive" env:"QUEUE_INTERVAL" envDefault:"100ms" help:"codel: how long the queue must stay non-empty to count as overload rather than a burst" accepts:"a duration with a unit, e.g. 100ms, above 0"`
	AdaptiveMin          int                 `mode:"adaptive" env:"ADAPTIVE_MIN" envDefault:"1" help:"adaptive: the limit never goes below this (nor below the most the upstream served unstretched)" accepts:"a whole number from 1 to 1000000"`
	AdaptiveMax          int                 `mode:"adaptive" env:"ADAPTIVE_MAX" envDefault:"0" help:"adaptive: the limit never goes above this, nor admission before the first limit; 0 = no bound" accepts:"a whole number from 0 to 1000000, 0 or at least LOOMGATE_ADAPTIVE_MIN"`
	Probe                Switch              `env:"PROBE" envDefault:"auto" help:"when the upstream was never seen at a calmer load than now, admit fewer for a few seconds (never rejecting) to find whether it queues inside and its capacity; auto = on in adaptive mode, off in the others and in a dry run" accepts:"auto, on or off; not on with LOOMGATE_DRY_RUN=true"`
	Bulkhead             int                 `mode:"unbounded" env:"BULKHEAD" envDefault:"0" help:"unbounded: max concurrent requests, 0 = off" accepts:"a whole number from 0 to 1000000"`
	BulkheadWait         time.Duration       `mode:"unbounded" env:"BULKHEAD_WAIT" envDefault:"0s" help:"unbounded: how long a request may wait for the bulkhead, 0 = fail fast" accepts:"a duration with a unit, e.g. 0s or 100ms, not negative, 0 unless LOOMGATE_BULKHEAD is above 0"`
	RejectStatus         int                 `env:"REJECT_STATUS" envDefault:"503" help:"status of admission's rejections (queue full or timed out, bulkhead, memory), with Retry-After" accepts:"503 or 429"`
	DryRun               bool                `env:"DRY_RUN" envDefault:"false" help:"admit every request, and count what the configured mode would have done (loomgate_dry_run_*)" accepts:"true or false"`
	MaxInFlightBytes     AutoSize            `env:"MAX_INFLIGHT_BYTES" envDefault:"auto" help:"memory bulkhead: bytes held by in-flight requests; auto = half the memory limit (GOMEMLIMIT, else the cgroup's), off without one; 0 = off" accepts:"auto, or a size in bytes, 0 or at least 96KiB (what a request without a body reserves), e.g. 0, 268435456, 256MiB or 1GB"`
	UpstreamTimeout      time.Duration       `env:"UPSTREAM_TIMEOUT" envDefault:"60s" help:"per request, from admission to the last response byte" accepts:"a duration with a unit, e.g. 60s, above 0"`
	HeaderTimeout        time.Duration       `env:"HEADER_TIMEOUT" envDefault:"10s" help:"longest a client may take to send a request's line, headers and first 8 KiB of body (408 beyond)" accepts:"a duration with a unit, e.g. 10s, above 0"`
	BodyTimeout          time.Duration       `env:"BODY_TIMEOUT" envDefault:"10s" help:"longest pause in the rest of a request body, which streams while holding a worker (408 beyond)" accepts:"a duration with a unit, e.g. 10s, above 0"`
	MaxBodyBytes         Size                `env:"MAX_BODY_BYTES" envDefault:"16MiB" help:"request body limit (413 beyond)" accepts:"a size in bytes above 0, at most 2GiB, e.g. 16MiB or 1048576"`
	MaxConns             AutoCount           `env:"MAX_CONNS" envDefault:"auto" help:"client connections open at once (an upgraded one counts twice, for its own upstream connection); beyond, new ones wait in the listen backlog until one closes. auto = the lower of what the open-file limit leaves after the upstream pool and 64 spare descriptors, and what half the memory the memory bulkhead leaves holds at 32 KiB a connection; 0 = unbounded" accepts:"auto, or a whole number from 0 to 10000000"`
	DrainTimeout         time.Duration       `env:"DRAIN_TIMEOUT" envDefault:"30s" help:"on SIGTERM: how long queued and in-flight requests and open HTTP/2 streams may finish; upgraded connections (WebSocket) are closed at its end, with a close frame" accepts:"a duration with a unit, e.g. 30s, not negative"`
	ReadyFollowsUpstream time.Duration       `env:"READY_FOLLOWS_UPSTREAM" envDefault:"10s" help:"/readyz fails once connects to the upstream have been refused this long with none accepted since, and before the first is accepted; 0 = /readyz does not follow the upstream (set it for an upstream many pods share)" accepts:"a duration with a unit, e.g. 10s, not negative; 0s = off"`
	MaxUpgraded          int                 `env:"MAX_UPGRADED" envDefault:"0" help:"upgraded connections (WebSocket) open at once; a handshake beyond is rejected like a full queue (rejected_upgraded); 0 = unbounded" accepts:"a whole number from 0 to 10000000"`
	UpgradedIdleTimeout  time.Duration       `env:"UPGRADED_IDLE_TIMEOUT" envDefault:"0s" help:"close an upgraded connection that carried nothing either way for this long (a WebSocket gets a close frame, 1001); 0 = never" accepts:"a duration with a unit, e.g. 0s or 10m, not negative"`
	ServerTiming         bool                `env:"SERVER_TIMING" envDefault:"true" help:"add the Server-Timing response header" accepts:"true or false"`
	AccessLog            string              `env:"ACCESS_LOG" envDefault:"off" help:"one JSON line per request on stdout" accepts:"off or json"`
	LogLevel             LogLevel            `env:"LOG_LEVEL" envDefault:"info" help:"level of the process log on stderr" accepts:"debug, info, warn or error"`
	UpstreamMetricsURL   string              `env:"UPSTREAM_METRICS_URL" envDefault:"" help:"optional: the service's own Prometheus endpoint, for its memory" accepts:"empty, or an http:// or https:// URL"`
	UpstreamMemoryMetric series.Selector     `env:"UPSTREAM_MEMORY_METRIC" envDefault:"process_resident_memory_bytes" help:"the series to read there (summed)" accepts:"a metric name with optional = or != label matchers, e.g. jvm_memory_used_bytes{area=\"heap\"}"`
	Routes               route.Patterns      `env:"ROUTES" envDefault:"" help:"route classes the advice compares like with like: name=[METHOD ]/path/prefix pairs, * for one segment; empty: method and first path segment, the first 32 seen" accepts:"empty, or e.g. checkout=POST /api/checkout,search=/api/search,orders=/users/*/orders"`
	MemoryBudgetBytes    Size                `env:"MEMORY_BUDGET_BYTES" envDefault:"0" help:"memory the advice may plan for, 0 = none" accepts:"a size in bytes, e.g. 0 or 2GiB"`
	Priorities           string              `env:"PRIORITIES" envDefault:"" help:"priority levels of route classes: a freed permit goes to the highest level waiting, and a full queue sheds the lowest first; classes of LOOMGATE_ROUTES not named are default" accepts:"empty, or class=level pairs over LOOMGATE_ROUTES' classes, levels critical, high, default or sheddable, e.g. checkout=critical,batch=sheddable"`
	Shares               string              `env:"SHARES" envDefault:"" help:"guaranteed shares of the limit by level: a level below its share is served first, and its share is held for it while it has requests in flight or waiting (lent to the others only while it has none), so a share above what the level uses idles the difference" accepts:"empty, or level=percent pairs adding up to 100 at most, e.g. critical=50,sheddable=10"`
	PriorityHeader       string              `env:"PRIORITY_HEADER" envDefault:"" help:"a request header (or gRPC metadata key) naming a level, which sets the request's in place of its class's; trusted as sent, so strip it where clients cannot be trusted" accepts:"empty, or a header name, e.g. X-Priority"`
	FlowKey              string              `env:"FLOW_KEY" envDefault:"" help:"what tells flows apart within a level for fair queuing: the client's address, or a header (a tenant's id); a flow that sends ten times the others gets its fair share while they wait" accepts:"empty, client, or header:<name>, e.g. header:X-Tenant-Id"`
	Pprof                bool                `env:"PPROF" envDefault:"false" help:"serve /debug/pprof/ on the admin listener, to clients on loopback only (kubectl port-forward arrives there)" accepts:"true or false"`
}

// Limiter returns the limiter's part of the configuration: every mode's
// settings, of which the limiter enforces Mode's.
func (c Config) Limiter() limiter.Config {
	return limiter.Config{
		Mode:    c.Mode,
		Workers: c.Workers, QueueSize: c.QueueSize, QueueTimeout: c.QueueTimeout,
		QueuePolicy: c.QueuePolicy, QueueTarget: c.QueueTarget, QueueInterval: c.QueueInterval,
		Bulkhead: c.Bulkhead, BulkheadWait: c.BulkheadWait,
		Ceiling:          c.AdaptiveMax,
		MaxInFlightBytes: c.inflightBytes(),
		Probe:            c.ProbeOn(),
		Priorities:       c.priorities().On(),
		Shares:           c.priorities().Shares,
	}
}

// priorities is LOOMGATE_PRIORITIES and its kin, read against the route
// classes; Validate reports their problems, and the zero value stands for
// what it refused.
func (c Config) priorities() Priorities {
	p, problems := parsePriorities(c, c.Routes.Classes())
	if len(problems) > 0 {
		return Priorities{}
	}
	return p
}

// ProbeOn reports whether the probe runs: LOOMGATE_PROBE=on, or auto in
// adaptive mode. Never in a dry run, which changes nothing.
func (c Config) ProbeOn() bool {
	switch {
	case c.DryRun || c.Probe == SwitchOff:
		return false
	case c.Probe == SwitchOn:
		return true
	}
	return c.Mode == limiter.Adaptive
}

// inflightBytes is MaxInFlightBytes for the limiter: auto is resolved by
// New, and is checked here as none.
func (c Config) inflightBytes() int64 {
	if c.MaxInFlightBytes == SizeAuto {
		return 0
	}
	return int64(c.MaxInFlightBytes)
}

// ConfigError is every problem of a Config, so that an operator fixes them
// in one round instead of one per restart.
type ConfigError struct {
	Problems []field.Error
}

func (e *ConfigError) Error() string {
	var b strings.Builder
	b.WriteString("invalid configuration:")
	for _, p := range e.Problems {
		b.WriteString("\n  ")
		b.WriteString(p.Error())
	}
	return b.String()
}

// Validate reports every problem of c as a *ConfigError, or nil. The rules
// of a part (the limiter's, the proxy's, the metrics') are the part's own,
// from its Validate: they are stated once, and a part names its fields as
// Config does.
func (c Config) Validate() error {
	var problems []field.Error
	bad := func(name, format string, args ...any) {
		problems = append(problems, field.Error{Field: name, Problem: fmt.Sprintf(format, args...)})
	}
	if err := validListen(c.Listen); err != nil {
		bad("Listen", "%v", err)
	}
	if err := validListen(c.AdminListen); err != nil {
		bad("AdminListen", "%v", err)
	} else if validListen(c.Listen) == nil && listenersClash(c.Listen, c.AdminListen) {
		// Named with Listen: either variable may be the one to change.
		bad("AdminListen", "is %s; want a port Listen (%s) does not take: the admin listener must stay reachable when traffic is saturated", c.AdminListen, c.Listen)
	}
	// A URL copied with a space or a line break around it, or written
	// with one inside, is refused in words of its own: url.Parse refuses
	// some as "not a URL", and takes others into the path, where
	// /metrics%20 is asked for and is not there.
	for _, u := range []struct{ field, v string }{{"Upstream", c.Upstream}, {"UpstreamMetricsURL", c.UpstreamMetricsURL}} {
		switch {
		case strings.TrimSpace(u.v) != u.v:
			bad(u.field, "has white space before or after the URL; remove it")
		case strings.ContainsFunc(u.v, unicode.IsSpace):
			bad(u.field, "has white space inside; a URL writes a space as %%20")
		}
	}
	const most = 1_000_000
	// The lower bounds are the limiter's, checked with its Validate below.
	for _, n := range []struct {
		field string
		v     int
	}{{"Workers", c.Workers}, {"QueueSize", c.QueueSize}, {"Bulkhead", c.Bulkhead}} {
		if n.v > most {
			bad(n.field, "is %d; want at most %d", n.v, most)
		}
	}
	for _, d := range []struct {
		field string
		v     time.Duration
	}{{"UpstreamTimeout", c.UpstreamTimeout}, {"HeaderTimeout", c.HeaderTimeout}, {"BodyTimeout", c.BodyTimeout}} {
		// Zero means "the default" to the proxy, but the variables have
		// defaults of their own: a zero here was written by someone.
		if d.v <= 0 {
			bad(d.field, "is %v; want above 0", d.v)
		}
	}
	// 0 is the proxy's "the default", but the variable has a default of
	// its own: a 0 here was written by someone, and is no status.
	if c.RejectStatus != 503 && c.RejectStatus != 429 {
		bad("RejectStatus", "is %d; want 503 or 429", c.RejectStatus)
	}
	if c.MaxBodyBytes <= 0 {
		bad("MaxBodyBytes", "is %d; want above 0", c.MaxBodyBytes)
	} else if c.MaxBodyBytes > proxy.MaxBodyLimit {
		bad("MaxBodyBytes", "is %d; want at most %s (%d)", c.MaxBodyBytes, Size(proxy.MaxBodyLimit), proxy.MaxBodyLimit)
	}
	// A request reserves RequestOverheadBytes at the least, its body's
	// bytes on top: a bulkhead smaller than that refuses every request.
	if b := c.MaxInFlightBytes; b != SizeAuto && b > 0 && int64(b) < proxy.RequestOverheadBytes {
		bad("MaxInFlightBytes", "is %d; want 0 (off), or at least %s, what a request without a body reserves: less refuses every request", b, Size(proxy.RequestOverheadBytes))
	}
	if c.MaxConns != CountAuto && (c.MaxConns < 0 || c.MaxConns > 10_000_000) {
		bad("MaxConns", "is %d; want auto, or 0 (unbounded) to 10000000", c.MaxConns)
	}
	// The codel variables are checked whatever QUEUE_POLICY is, as the
	// other modes' are: a flip to codel must not fail at start. Their
	// defaults are above 0, so a 0 was written by someone.
	for _, d := range []struct {
		field string
		v     time.Duration
	}{{"QueueTarget", c.QueueTarget}, {"QueueInterval", c.QueueInterval}} {
		if d.v <= 0 {
			bad(d.field, "is %v; want above 0", d.v)
		}
	}
	if c.AdaptiveMin < 1 || c.AdaptiveMin > most {
		bad("AdaptiveMin", "is %d; want 1 to %d", c.AdaptiveMin, most)
	}
	if c.AdaptiveMax < 0 || c.AdaptiveMax > most || c.AdaptiveMax > 0 && c.AdaptiveMax < c.AdaptiveMin {
		bad("AdaptiveMax", "is %d; want 0 (no bound), or AdaptiveMin (%d) to %d", c.AdaptiveMax, c.AdaptiveMin, most)
	}
	switch {
	case c.Probe != SwitchAuto && c.Probe != SwitchOn && c.Probe != SwitchOff:
		bad("Probe", "is %q; want auto, on or off", string(c.Probe))
	case c.Probe == SwitchOn && c.DryRun:
		bad("Probe", "is on; want off or auto with DryRun: a probe holds requests back for a few seconds, and a dry run changes nothing")
	}
	if c.DrainTimeout < 0 {
		bad("DrainTimeout", "is %v; want 0 or more", c.DrainTimeout)
	}
	if c.ReadyFollowsUpstream < 0 {
		bad("ReadyFollowsUpstream", "is %v; want 0 (never) or more", c.ReadyFollowsUpstream)
	}
	if c.MaxUpgraded < 0 || c.MaxUpgraded > 10_000_000 {
		bad("MaxUpgraded", "is %d; want 0 (unbounded) to 10000000", c.MaxUpgraded)
	}
	if c.UpgradedIdleTimeout < 0 {
		bad("UpgradedIdleTimeout", "is %v; want 0 (never) or more", c.UpgradedIdleTimeout)
	}
	if c.AccessLog != "off" && c.AccessLog != "json" {
		bad("AccessLog", "is %q; want off or json", c.AccessLog)
	}
	if c.UpstreamMemoryMetric.Name == "" {
		bad("UpstreamMemoryMetric", "names no metric")
	}
	_, ps := parsePriorities(c, c.Routes.Classes())
	for _, p := range ps {
		bad(p.field, "%s", p.text)
	}
	// A placeholder policy and registerer: what is checked here is the
	// configuration, not the wiring.
	// The limiter checks the fields of the mode it runs; checking fixed's
	// and unbounded's settings as if each were in force (adaptive's queue
	// is fixed's) makes a flip of the mode unable to fail at start.
	asFixed, asUnbounded := c.Limiter(), c.Limiter()
	asFixed.Mode, asUnbounded.Mode = limiter.Fixed, limiter.Unbounded
	limiterProblems := asFixed.Validate()
	switch c.Mode {
	case limiter.Fixed, limiter.Unbounded:
	case limiter.Adaptive:
		// Adaptive's queue is Fixed's, checked with it above.
	default:
		limiterProblems = c.Limiter().Validate()
	}
	// Pass-through admits without holding anything: a stand-in, as
	// Validate never calls it.
	pass, _ := limiter.New(limiter.Config{Mode: limiter.Unbounded})
	parts := []error{
		limiterProblems, asUnbounded.Validate(),
		proxy.Config{Upstream: c.Upstream, Policy: pass, MaxBodyBytes: int64(c.MaxBodyBytes), RejectStatus: c.RejectStatus}.Validate(),
		advice.Config{
			State: func() advice.State { return advice.State{} }, UpstreamMetricsURL: c.UpstreamMetricsURL,
			Settings: advice.Settings{MemoryBudgetBytes: int64(c.MemoryBudgetBytes)},
		}.Validate(),
	}
	for _, err := range parts {
		for _, e := range field.All(err) {
			bad(e.Field, "%s", e.Problem)
		}
	}
	if len(problems) > 0 {
		return &ConfigError{Problems: dedupe(problems)}
	}
	return nil
}

// dedupe keeps the first problem of each field: one line a variable.
func dedupe(problems []field.Error) []field.Error {
	seen := make(map[string]bool, len(problems))
	out := problems[:0]
	for _, p := range problems {
		if p.Field != "" && seen[p.Field] {
			continue
		}
		seen[p.Field] = true
		out = append(out, p)
	}
	return out
}

func validListen(addr string) error {
	if addr == "" {
		return errors.New("is empty")
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return errors.New("is not host:port")
	}
	if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		return fmt.Errorf("has port %q; want 0 to 65535", port)
	}
	if strings.ContainsAny(host, "/ ") {
		return fmt.Errorf("has host %q, which is not a host name or address", host)
	}
	return nil
}

// listenersClash reports whether listeners at a and b (both valid
// host:port) would want the same port on the same address: the same port,
// not 0 (a port of the kernel's choosing), on the same host or where
// either listens on every address.
func listenersClash(a, b string) bool {
	ha, pa, _ := net.SplitHostPort(a)
	hb, pb, _ := net.SplitHostPort(b)
	na, _ := strconv.Atoi(pa)
	nb, _ := strconv.Atoi(pb)
	if na != nb || na == 0 {
		return false
	}
	wildcard := func(h string) bool {
		ip := net.ParseIP(h)
		return h == "" || ip != nil && ip.IsUnspecified()
	}
	loopback := func(h string) bool {
		ip := net.ParseIP(h)
		return strings.EqualFold(h, "localhost") || ip != nil && ip.IsLoopback()
	}
	return wildcard(ha) || wildcard(hb) || strings.EqualFold(ha, hb) ||
		// localhost is 127.0.0.1 and ::1 both.
		(strings.EqualFold(ha, "localhost") || strings.EqualFold(hb, "localhost")) && loopback(ha) && loopback(hb)
}

// Size is a number of bytes, written as a plain number or with a unit: B,
// KB, MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB and Ki, Mi, Gi, Ti
// (powers of 1024, the last four as Kubernetes writes them). A decimal
// such as 1.5GiB is accepted when it is a whole number of bytes.
type Size int64

var sizeUnits = map[string]int64{
	"": 1, "b": 1,
	"kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
	"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
	"ki": 1 << 10, "mi": 1 << 20, "gi": 1 << 30, "ti": 1 << 40,
}

// UnmarshalText reads a Size.
func (b *Size) UnmarshalText(text []byte) error {
	s := strings.TrimSpace(string(text))
	i := 0
	for i < len(s) && (s[i] >= '0' && s[i] <= '9' || s[i] == '-' || s[i] == '.') {
		i++
	}
	if i == 0 {
		return errors.New("not a size")
	}
	mult, ok := sizeUnits[strings.ToLower(strings.TrimSpace(s[i:]))]
	if !ok {
		return fmt.Errorf("unknown unit %q", strings.TrimSpace(s[i:]))
	}
	if n, err := strconv.ParseInt(s[:i], 10, 64); err == nil {
		if n != 0 && n*mult/mult != n {
			return errors.New("too large")
		}
		*b = Size(n * mult)
		return nil
	}
	f, err := strconv.ParseFloat(s[:i], 64)
	if err != nil {
		return errors.New("not a size")
	}
	v := f * float64(mult)
	switch {
	case math.Abs(v) >= 1<<62:
		return errors.New("too large")
	case v != math.Trunc(v):
		return fmt.Errorf("%s is not a whole number of bytes", s)
	}
	*b = Size(v)
	return nil
}

// String writes the size the way an operator would, for the start-up log.
func (b Size) String() string {
	for _, u := range []struct {
		name string
		size int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if b != 0 && int64(b)%u.size == 0 {
			return strconv.FormatInt(int64(b)/u.size, 10) + u.name
		}
	}
	return strconv.FormatInt(int64(b), 10)
}

// LogLevel is LOOMGATE_LOG_LEVEL: one of slog's four named levels, debug,
// info, warn or error, in any case. slog also reads offsets from them
// (info+2, ERROR+100), levels no line of the log is written at and no
// operator means: those are refused.
type LogLevel slog.Level

// UnmarshalText reads a level's name.
func (l *LogLevel) UnmarshalText(text []byte) error {
	switch strings.ToLower(string(text)) {
	case "debug":
		*l = LogLevel(slog.LevelDebug)
	case "info":
		*l = LogLevel(slog.LevelInfo)
	case "warn":
		*l = LogLevel(slog.LevelWarn)
	case "error":
		*l = LogLevel(slog.LevelError)
	default:
		return errors.New("unknown level")
	}
	return nil
}

// MarshalText writes the level as slog does.
func (l LogLevel) MarshalText() ([]byte, error) { return slog.Level(l).MarshalText() }

// Level is the slog.Level, which makes a LogLevel a slog.Leveler.
func (l LogLevel) Level() slog.Level { return slog.Level(l) }

// Switch is a variable that is on, off, or auto: as the mode has it.
type Switch string

// The values of a Switch.
const (
	SwitchAuto Switch = "auto"
	SwitchOn   Switch = "on"
	SwitchOff  Switch = "off"
)

// UnmarshalText reads auto, on or off, in any case.
func (s *Switch) UnmarshalText(text []byte) error {
	switch v := Switch(strings.ToLower(string(text))); v {
	case SwitchAuto, SwitchOn, SwitchOff:
		*s = v
		return nil
	}
	return errors.New("want auto, on or off")
}

// MarshalText writes the switch as it is set.
func (s Switch) MarshalText() ([]byte, error) { return []byte(s), nil }

// InactiveVariables names the variables that mode does not use: the other
// modes', checked but not in force.
func InactiveVariables(mode limiter.Mode) []string {
	var names []string
	for _, v := range Variables() {
		if !v.ActiveIn(mode) {
			names = append(names, v.Name)
		}
	}
	return names
}
