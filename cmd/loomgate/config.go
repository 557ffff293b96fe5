package main

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/caarlos0/env/v11"

	"github.com/loomgate/loomgate/metrics"
)

// envPrefix is prepended to every variable name in config's tags.
const envPrefix = "LOOMGATE_"

// config is the sidecar's whole configuration, read from LOOMGATE_* variables.
// The tags are the single source for parsing, for `loomgate -h` and for the
// error messages: env names the variable, envDefault its default, help says
// what it does and accepts what a valid value looks like.
type config struct {
	Listen               string        `env:"LISTEN" envDefault:":8080" help:"traffic listener" accepts:"host:port, e.g. :8080"`
	AdminListen          string        `env:"ADMIN_LISTEN" envDefault:":9090" help:"admin listener: metrics, health, advice, status page; never subject to admission" accepts:"host:port, e.g. :9090, different from LOOMGATE_LISTEN"`
	Upstream             string        `env:"UPSTREAM" envDefault:"http://127.0.0.1:8081" help:"the service behind the sidecar" accepts:"http://host:port with no path, query or user"`
	Mode                 string        `env:"MODE" envDefault:"unbounded" help:"admission policy" accepts:"fixed or unbounded"`
	Workers              int           `mode:"fixed" env:"WORKERS" envDefault:"200" help:"fixed: requests served at once" accepts:"a whole number from 1 to 1000000"`
	QueueSize            int           `mode:"fixed" env:"QUEUE_SIZE" envDefault:"10000" help:"fixed: waiters allowed in the FIFO queue; more are rejected at once" accepts:"a whole number from 0 to 1000000 (0 = reject when all workers are busy)"`
	QueueTimeout         time.Duration `mode:"fixed" env:"QUEUE_TIMEOUT" envDefault:"30s" help:"fixed: longest wait in the queue before rejection" accepts:"a duration with a unit, e.g. 30s or 250ms, above 0"`
	Bulkhead             int           `mode:"unbounded" env:"BULKHEAD" envDefault:"0" help:"unbounded: max concurrent requests, 0 = off" accepts:"a whole number from 0 to 1000000"`
	BulkheadWait         time.Duration `mode:"unbounded" env:"BULKHEAD_WAIT" envDefault:"0s" help:"unbounded: how long a request may wait for the bulkhead, 0 = fail fast" accepts:"a duration with a unit, e.g. 0s or 100ms, not negative"`
	MaxInflightBytes     byteSize      `env:"MAX_INFLIGHT_BYTES" envDefault:"0" help:"memory bulkhead: bytes held by in-flight requests, 0 = off" accepts:"a size in bytes, e.g. 0, 268435456, 256MiB or 1GB"`
	UpstreamTimeout      time.Duration `env:"UPSTREAM_TIMEOUT" envDefault:"60s" help:"per request, from admission to the last response byte" accepts:"a duration with a unit, e.g. 60s, above 0"`
	HeaderTimeout        time.Duration `env:"HEADER_TIMEOUT" envDefault:"10s" help:"longest a client may take to send a request's line, headers and first 8 KiB of body (408 beyond)" accepts:"a duration with a unit, e.g. 10s, above 0"`
	BodyTimeout          time.Duration `env:"BODY_TIMEOUT" envDefault:"10s" help:"longest pause in the rest of a request body, which streams while holding a worker (408 beyond)" accepts:"a duration with a unit, e.g. 10s, above 0"`
	MaxBodyBytes         byteSize      `env:"MAX_BODY_BYTES" envDefault:"16MiB" help:"request body limit (413 beyond)" accepts:"a size in bytes above 0, e.g. 16MiB or 1048576"`
	DrainTimeout         time.Duration `env:"DRAIN_TIMEOUT" envDefault:"30s" help:"on SIGTERM: how long queued and in-flight requests may finish" accepts:"a duration with a unit, e.g. 30s, not negative"`
	ServerTiming         bool          `env:"SERVER_TIMING" envDefault:"true" help:"add the Server-Timing response header" accepts:"true or false"`
	AccessLog            string        `env:"ACCESS_LOG" envDefault:"off" help:"one JSON line per request on stdout" accepts:"off or json"`
	LogLevel             string        `env:"LOG_LEVEL" envDefault:"info" help:"level of the process log on stderr" accepts:"debug, info, warn or error"`
	UpstreamMetricsURL   string        `env:"UPSTREAM_METRICS_URL" envDefault:"" help:"optional: the service's own Prometheus endpoint, for its memory" accepts:"empty, or an http:// URL"`
	UpstreamMemoryMetric string        `env:"UPSTREAM_MEMORY_METRIC" envDefault:"process_resident_memory_bytes" help:"the series to read there (summed)" accepts:"a metric name with optional = or != label matchers, e.g. jvm_memory_used_bytes{area=\"heap\"}"`
	MemoryBudgetBytes    byteSize      `env:"MEMORY_BUDGET_BYTES" envDefault:"0" help:"memory the advice may plan for, 0 = none" accepts:"a size in bytes, e.g. 0 or 2GiB"`
	Pprof                bool          `env:"PPROF" envDefault:"false" help:"serve /debug/pprof/ on the admin listener" accepts:"true or false"`
}

// configVar describes one variable of config, for help text, error messages
// and checks of deploy files.
type configVar struct {
	Name    string // full name, with the LOOMGATE_ prefix
	Default string
	Help    string
	Accepts string
	// Mode is the mode the variable applies to, empty when it applies to
	// both; in the other mode it is checked but inactive.
	Mode  string
	field string // Go field name, to map env's errors back to the variable
}

// configVars lists every variable config reads, in declaration order.
func configVars() []configVar {
	t := reflect.TypeFor[config]()
	vars := make([]configVar, 0, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		vars = append(vars, configVar{
			Name:    envPrefix + f.Tag.Get("env"),
			Default: f.Tag.Get("envDefault"),
			Help:    f.Tag.Get("help"),
			Accepts: f.Tag.Get("accepts"),
			Mode:    f.Tag.Get("mode"),
			field:   f.Name,
		})
	}
	return vars
}

// configValue renders v's value in cfg the way the variable is written.
func configValue(cfg config, v configVar) string {
	return fmt.Sprint(reflect.ValueOf(cfg).FieldByName(v.field).Interface())
}

// configError holds every problem found in the environment, so that an
// operator fixes them in one round instead of one per restart.
type configError struct {
	problems []string
}

func (e *configError) Error() string {
	return "invalid configuration:\n  " + strings.Join(e.problems, "\n  ")
}

// parseConfig reads config from environ (os.Environ's form). Every problem is
// reported, each naming the variable, the value given and what is accepted.
func parseConfig(environ []string) (config, error) {
	envMap := env.ToMap(environ)
	vars := configVars()
	byField := make(map[string]configVar, len(vars))
	known := make(map[string]bool, len(vars))
	for _, v := range vars {
		byField[v.field] = v
		known[v.Name] = true
	}

	var cfg config
	var problems []string
	// A field that failed to parse keeps its zero value; judging it again
	// would report a second, misleading problem for the same variable.
	failed := make(map[string]bool)
	bad := func(v configVar, detail string) {
		if failed[v.Name] {
			return
		}
		failed[v.Name] = true
		problems = append(problems, fmt.Sprintf("%s=%q: %s; accepted: %s", v.Name, envMap[v.Name], detail, v.Accepts))
	}

	err := env.ParseWithOptions(&cfg, env.Options{Prefix: envPrefix, Environment: envMap})
	var agg env.AggregateError
	if errors.As(err, &agg) {
		for _, e := range agg.Errors {
			var pe env.ParseError
			if errors.As(e, &pe) {
				bad(byField[pe.Name], parseDetail(pe.Err))
				continue
			}
			problems = append(problems, e.Error())
		}
	} else if err != nil {
		return cfg, err
	}
	check := func(field string, ok bool, detail string) {
		if !ok {
			bad(byField[field], detail)
		}
	}

	check("Listen", validListen(cfg.Listen), "not a listen address")
	check("AdminListen", validListen(cfg.AdminListen), "not a listen address")
	check("AdminListen", cfg.AdminListen != cfg.Listen || strings.HasSuffix(cfg.Listen, ":0"),
		"the same as LOOMGATE_LISTEN; the admin listener must stay reachable when traffic is saturated")
	check("Upstream", validUpstream(cfg.Upstream) == nil, fmt.Sprint(validUpstream(cfg.Upstream)))
	check("Mode", cfg.Mode == "fixed" || cfg.Mode == "unbounded", "unknown mode")
	check("Workers", cfg.Workers >= 1 && cfg.Workers <= 1_000_000, "out of range")
	check("QueueSize", cfg.QueueSize >= 0 && cfg.QueueSize <= 1_000_000, "out of range")
	check("QueueTimeout", cfg.QueueTimeout > 0, "must be above 0")
	check("Bulkhead", cfg.Bulkhead >= 0 && cfg.Bulkhead <= 1_000_000, "out of range")
	check("BulkheadWait", cfg.BulkheadWait >= 0, "negative")
	check("MaxInflightBytes", cfg.MaxInflightBytes >= 0, "negative")
	check("UpstreamTimeout", cfg.UpstreamTimeout > 0, "must be above 0")
	check("HeaderTimeout", cfg.HeaderTimeout > 0, "must be above 0")
	check("BodyTimeout", cfg.BodyTimeout > 0, "must be above 0")
	check("MaxBodyBytes", cfg.MaxBodyBytes > 0 && cfg.MaxBodyBytes <= 1<<31-1, "out of range (at most 2GiB)")
	check("DrainTimeout", cfg.DrainTimeout >= 0, "negative")
	check("AccessLog", cfg.AccessLog == "off" || cfg.AccessLog == "json", "unknown access log format")
	check("LogLevel", validLogLevel(cfg.LogLevel), "unknown log level")
	check("UpstreamMetricsURL", cfg.UpstreamMetricsURL == "" || validMetricsURL(cfg.UpstreamMetricsURL), "not an http:// URL")
	check("UpstreamMemoryMetric", validSelector(cfg.UpstreamMemoryMetric) == nil, fmt.Sprint(validSelector(cfg.UpstreamMemoryMetric)))
	check("MemoryBudgetBytes", cfg.MemoryBudgetBytes >= 0, "negative")

	// The other mode's settings are accepted and checked as strictly as the
	// active mode's: a ConfigMap that carries both flips with one edit of
	// LOOMGATE_MODE, and the flip can never fail at start.
	check("BulkheadWait", cfg.BulkheadWait == 0 || cfg.Bulkhead > 0, "has no effect without LOOMGATE_BULKHEAD above 0")

	var unknown []string
	for name := range envMap {
		if strings.HasPrefix(name, envPrefix) && !known[name] {
			unknown = append(unknown, name)
		}
	}
	sort.Strings(unknown)
	for _, name := range unknown {
		problems = append(problems, fmt.Sprintf("%s=%q: unknown variable%s; `loomgate -h` lists them all", name, envMap[name], suggest(name, vars)))
	}

	if len(problems) > 0 {
		// Report in the order of `loomgate -h`, whichever check found what.
		order := make(map[string]int, len(vars))
		for i, v := range vars {
			order[v.Name] = i
		}
		rank := func(p string) int {
			name, _, _ := strings.Cut(p, "=")
			if i, ok := order[name]; ok {
				return i
			}
			return len(vars)
		}
		sort.SliceStable(problems, func(i, j int) bool { return rank(problems[i]) < rank(problems[j]) })
		return cfg, &configError{problems: problems}
	}
	return cfg, nil
}

// parseDetail turns a parser's error into words about the value, without
// the Go package prefixes (strconv.ParseInt: ...) that mean nothing to an operator.
func parseDetail(err error) string {
	var ne *strconv.NumError
	if errors.As(err, &ne) {
		return "not a number"
	}
	msg := err.Error()
	if strings.Contains(msg, "missing unit in duration") {
		return "a duration needs a unit"
	}
	if strings.HasPrefix(msg, "time: ") {
		return "not a duration"
	}
	return msg
}

func validListen(addr string) bool {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	p, err := strconv.Atoi(port)
	return err == nil && p >= 0 && p <= 65535 && !strings.ContainsAny(host, "/ ")
}

// validUpstream accepts exactly what the proxy can honour: plain HTTP to one
// host. A path prefix would have to be rewritten into every request, which
// the proxy deliberately does not do (paths are forwarded byte for byte).
func validUpstream(raw string) error {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return errors.New("not a URL")
	case u.Scheme != "http":
		return errors.New("not an http:// URL")
	case u.Host == "" || u.Hostname() == "":
		return errors.New("no host")
	case u.User != nil:
		return errors.New("user information is not supported")
	case u.Path != "" && u.Path != "/", u.RawQuery != "", u.Fragment != "":
		return errors.New("paths, queries and fragments are not supported")
	}
	return nil
}

func validMetricsURL(raw string) bool {
	u, err := url.Parse(raw)
	return err == nil && u.Scheme == "http" && u.Hostname() != ""
}

// validSelector checks LOOMGATE_UPSTREAM_MEMORY_METRIC the way the metrics
// package will read it, and says what is wrong in the operator's terms.
func validSelector(s string) error {
	_, err := metrics.ParseSelector(s)
	if err != nil {
		return errors.New(strings.TrimPrefix(err.Error(), metrics.ErrSelector.Error()+": "))
	}
	return nil
}

func validLogLevel(s string) bool {
	switch s {
	case "debug", "info", "warn", "error":
		return true
	}
	return false
}

// suggest names the known variable closest to a misspelt one.
func suggest(name string, vars []configVar) string {
	best, bestDist := "", 4
	for _, v := range vars {
		if d := editDistance(name, v.Name); d < bestDist {
			best, bestDist = v.Name, d
		}
	}
	if best == "" {
		return ""
	}
	return " (did you mean " + best + "?)"
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// byteSize is a number of bytes written as a plain integer or with a unit:
// B, KB, MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB, Ki, Mi, Gi, Ti
// (powers of 1024, the last four as Kubernetes writes them).
type byteSize int64

var byteUnits = map[string]int64{
	"": 1, "b": 1,
	"kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
	"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
	"ki": 1 << 10, "mi": 1 << 20, "gi": 1 << 30, "ti": 1 << 40,
}

// UnmarshalText lets env parse byteSize fields.
func (b *byteSize) UnmarshalText(text []byte) error {
	s := strings.TrimSpace(string(text))
	i := 0
	for i < len(s) && (s[i] >= '0' && s[i] <= '9' || s[i] == '-') {
		i++
	}
	if i == 0 {
		return errors.New("not a size")
	}
	n, err := strconv.ParseInt(s[:i], 10, 64)
	if err != nil {
		return errors.New("not a size")
	}
	mult, ok := byteUnits[strings.ToLower(strings.TrimSpace(s[i:]))]
	if !ok {
		return fmt.Errorf("unknown unit %q", strings.TrimSpace(s[i:]))
	}
	if n != 0 && (n*mult/mult != n) {
		return errors.New("too large")
	}
	*b = byteSize(n * mult)
	return nil
}

// String writes the size the way an operator would, for the start-up log.
func (b byteSize) String() string {
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
