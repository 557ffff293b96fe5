package sidecar

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/loomgate/loomgate/limiter"
	"github.com/loomgate/loomgate/series"
)

func TestDefaults(t *testing.T) {
	cfg, err := ParseEnv(nil)
	if err != nil {
		t.Fatalf("ParseEnv(nil) = %v; want the defaults to be valid", err)
	}
	want := Config{
		Listen: ":8080", AdminListen: ":9090", Upstream: "http://127.0.0.1:8081", Mode: limiter.Unbounded,
		Workers: 200, QueueSize: 10000, QueueTimeout: 30 * time.Second,
		QueuePolicy: limiter.FIFO, QueueTarget: 5 * time.Millisecond, QueueInterval: 100 * time.Millisecond, AdaptiveMin: 1, UpstreamTimeout: 60 * time.Second,
		HeaderTimeout: 10 * time.Second, BodyTimeout: 10 * time.Second,
		MaxBodyBytes: 16 << 20, RejectStatus: 503, DrainTimeout: 30 * time.Second, ServerTiming: true, AccessLog: "off",
		MaxInFlightBytes: SizeAuto, MaxConns: CountAuto, Probe: SwitchAuto, ReadyFollowsUpstream: 10 * time.Second,
		LogLevel: LogLevel(slog.LevelInfo), UpstreamMemoryMetric: series.MustParse("process_resident_memory_bytes"),
	}
	if !reflect.DeepEqual(cfg, want) {
		t.Errorf("defaults = %+v\nwant %+v", cfg, want)
	}
}

func TestParseEnvProblems(t *testing.T) {
	tests := []struct {
		env  []string
		want []string // each problem's start, in order
	}{
		{[]string{"LOOMGATE_MODE=fixed", "LOOMGATE_WORKERS=50", "LOOMGATE_QUEUE_SIZE=0"}, nil},
		{[]string{"LOOMGATE_BULKHEAD=64", "LOOMGATE_BULKHEAD_WAIT=250ms", "LOOMGATE_MAX_INFLIGHT_BYTES=512MiB"}, nil},
		{[]string{"LOOMGATE_WORKERS=abc"}, []string{`LOOMGATE_WORKERS="abc": not a whole number`}},
		{[]string{"LOOMGATE_MODE=fixed", "LOOMGATE_QUEUE_TIMEOUT=100"}, []string{`LOOMGATE_QUEUE_TIMEOUT="100": a duration needs a unit`}},
		{[]string{"LOOMGATE_UPSTREAM=http://:80"}, []string{`LOOMGATE_UPSTREAM="http://:80": has no host`}},
		{[]string{"LOOMGATE_UPSTREAM=http://u:p@svc:80"}, []string{`LOOMGATE_UPSTREAM="http://u:p@svc:80": has user information`}},
		// The other mode's settings are accepted, and checked as strictly.
		{[]string{"LOOMGATE_MODE=fixed", "LOOMGATE_BULKHEAD=64", "LOOMGATE_BULKHEAD_WAIT=1s"}, nil},
		{[]string{"LOOMGATE_QUEUE_SIZE=5", "LOOMGATE_WORKERS=20"}, nil},
		{[]string{"LOOMGATE_MODE=fixed", "LOOMGATE_BULKHEAD_WAIT=1s"}, []string{`LOOMGATE_BULKHEAD_WAIT="1s": has no effect unless LOOMGATE_BULKHEAD is above 0`}},
		{[]string{"LOOMGATE_WORKERS=0"}, []string{`LOOMGATE_WORKERS="0": want at least 1`}},
		{[]string{"LOOMGATE_PROBE=maybe"}, []string{`LOOMGATE_PROBE="maybe"`}},
		{[]string{"LOOMGATE_ROUTES=checkout=/checkout,batch=/batch", "LOOMGATE_PRIORITIES=checkout=critical,batch=sheddable",
			"LOOMGATE_SHARES=critical=50,sheddable=10", "LOOMGATE_PRIORITY_HEADER=X-Priority", "LOOMGATE_FLOW_KEY=header:X-Tenant-Id"}, nil},
		{[]string{"LOOMGATE_PRIORITIES=checkout=critical"}, []string{`LOOMGATE_PRIORITIES="checkout=critical": it names route classes, so it needs LOOMGATE_ROUTES`}},
		{[]string{"LOOMGATE_ROUTES=checkout=/checkout", "LOOMGATE_PRIORITIES=cart=critical,checkout=urgent"},
			[]string{`LOOMGATE_PRIORITIES="cart=critical,checkout=urgent": "cart" names no class of LOOMGATE_ROUTES (other, checkout)`}},
		{[]string{"LOOMGATE_ROUTES=checkout=/checkout", "LOOMGATE_PRIORITIES=checkout=urgent"},
			[]string{`LOOMGATE_PRIORITIES="checkout=urgent": "checkout=urgent": level "urgent"; want critical, high, default or sheddable`}},
		{[]string{"LOOMGATE_SHARES=critical=80,default=40", "LOOMGATE_PRIORITY_HEADER=X-Priority"}, []string{`LOOMGATE_SHARES="critical=80,default=40": the shares add up to 120%, more than the whole limit`}},
		{[]string{"LOOMGATE_SHARES=critical=50"}, []string{`LOOMGATE_SHARES="critical=50": gives critical a share, but no request can be critical`}},
		{[]string{"LOOMGATE_SHARES=default=50", "LOOMGATE_FLOW_KEY=client"}, nil},
		{[]string{"LOOMGATE_FLOW_KEY=tenant", "LOOMGATE_PRIORITY_HEADER=X_Priority"},
			[]string{`LOOMGATE_PRIORITY_HEADER="X_Priority": want a header name`, `LOOMGATE_FLOW_KEY="tenant": want client, or header:<name>`}},
		{[]string{"LOOMGATE_PROBE=on", "LOOMGATE_DRY_RUN=true"}, []string{`LOOMGATE_PROBE="on": want off or auto with LOOMGATE_DRY_RUN`}},
		{[]string{"LOOMGATE_PROBE=OFF", "LOOMGATE_DRY_RUN=true", "LOOMGATE_MODE=adaptive"}, nil},
		{[]string{"LOOMGATE_LOG_LEVEL=loud", "LOOMGATE_PPROF=maybe"}, []string{`LOOMGATE_LOG_LEVEL="loud"`, `LOOMGATE_PPROF="maybe"`}},
		{[]string{"LOOMGATE_MAX_BODY_BYTES=0"}, []string{`LOOMGATE_MAX_BODY_BYTES="0": want above 0`}},
		// The documented most, 2GiB, is accepted, and no byte more.
		{[]string{"LOOMGATE_MAX_BODY_BYTES=2GiB"}, nil},
		{[]string{"LOOMGATE_MAX_BODY_BYTES=2147483648"}, nil},
		{[]string{"LOOMGATE_MAX_BODY_BYTES=2147483649"}, []string{`LOOMGATE_MAX_BODY_BYTES="2147483649": want at most 2GiB (2147483648)`}},
		{[]string{"LOOMGATE_UPSTREAM_METRICS_URL=ftp://x/metrics"}, []string{`LOOMGATE_UPSTREAM_METRICS_URL="ftp://x/metrics"`}},
		{[]string{"LOOMGATE_QUEUE_SIZ=1"}, []string{`LOOMGATE_QUEUE_SIZ="1": unknown variable (did you mean LOOMGATE_QUEUE_SIZE?)`}},
		// Found by probing: each was accepted, or reported in Go's words.
		{[]string{"LOOMGATE_UPSTREAM=http://127.0.0.1:99999"}, []string{`LOOMGATE_UPSTREAM="http://127.0.0.1:99999": has port 99999; want 1 to 65535`}},
		{[]string{"LOOMGATE_UPSTREAM=http://127.0.0.1:0"}, []string{`LOOMGATE_UPSTREAM="http://127.0.0.1:0": has port 0; want 1 to 65535`}},
		{[]string{"LOOMGATE_=5"}, []string{`LOOMGATE_="5": unknown variable`}},
		// The prefix in another case names no variable either.
		{[]string{"loomgate_workers=5"}, []string{`loomgate_workers="5": unknown variable (did you mean LOOMGATE_WORKERS?)`}},
		{[]string{"Loomgate_Mode=fixed"}, []string{`Loomgate_Mode="fixed": unknown variable (did you mean LOOMGATE_MODE?)`}},
		{[]string{"loomgate_=1"}, []string{`loomgate_="1": unknown variable`}},
		{[]string{"LOOMGATE_UPSTREAM=http://127.0.0.1:8081?"}, []string{`LOOMGATE_UPSTREAM="http://127.0.0.1:8081?": has a path, query or fragment`}},
		{[]string{"LOOMGATE_UPSTREAM="}, []string{`LOOMGATE_UPSTREAM="": empty; unset it for the default http://127.0.0.1:8081`}},
		{[]string{"LOOMGATE_MODE="}, []string{`LOOMGATE_MODE="": empty; unset it for the default unbounded`}},
		{[]string{"LOOMGATE_LISTEN="}, []string{`LOOMGATE_LISTEN="": empty; unset it for the default :8080`}},
		{[]string{"LOOMGATE_SERVER_TIMING=yes"}, []string{`LOOMGATE_SERVER_TIMING="yes": not true or false`}},
		{[]string{"LOOMGATE_DRAIN_TIMEOUT=abc"}, []string{`LOOMGATE_DRAIN_TIMEOUT="abc": not a duration;`}},
		{[]string{"LOOMGATE_QUEUE_TIMEOUT=-1s"}, []string{`LOOMGATE_QUEUE_TIMEOUT="-1s": want above 0;`}},
		{[]string{"LOOMGATE_READY_FOLLOWS_UPSTREAM=0s"}, nil},
		{[]string{"LOOMGATE_READY_FOLLOWS_UPSTREAM=-1s"}, []string{`LOOMGATE_READY_FOLLOWS_UPSTREAM="-1s": want 0 (never) or more;`}},
		{[]string{"LOOMGATE_READY_FOLLOWS_UPSTREAM=true"}, []string{`LOOMGATE_READY_FOLLOWS_UPSTREAM="true": not a duration;`}},
		{[]string{"LOOMGATE_MAX_INFLIGHT_BYTES=1.5MiB"}, nil},
		// Less than a request without a body reserves refuses every one.
		{[]string{"LOOMGATE_MAX_INFLIGHT_BYTES=95KiB"}, []string{`LOOMGATE_MAX_INFLIGHT_BYTES="95KiB": want 0 (off), or at least 96KiB, what a request without a body reserves`}},
		{[]string{"LOOMGATE_MAX_INFLIGHT_BYTES=1"}, []string{`LOOMGATE_MAX_INFLIGHT_BYTES="1": want 0 (off), or at least 96KiB`}},
		{[]string{"LOOMGATE_MAX_INFLIGHT_BYTES=96KiB"}, nil},
		{[]string{"LOOMGATE_MAX_INFLIGHT_BYTES=1.5"}, []string{`LOOMGATE_MAX_INFLIGHT_BYTES="1.5": 1.5 is not a whole number of bytes`}},
		{[]string{"LOOMGATE_MODE=adaptive"}, nil},
		{[]string{"LOOMGATE_MODE=elastic"}, []string{`LOOMGATE_MODE="elastic": unknown mode`}},
		{[]string{"LOOMGATE_MODE=adaptive", "LOOMGATE_ADAPTIVE_MIN=0"}, []string{`LOOMGATE_ADAPTIVE_MIN="0": want 1 to 1000000`}},
		{[]string{"LOOMGATE_ADAPTIVE_MIN=50", "LOOMGATE_ADAPTIVE_MAX=10"}, []string{`LOOMGATE_ADAPTIVE_MAX="10": want 0 (no bound), or LOOMGATE_ADAPTIVE_MIN (50) to 1000000`}},
		{[]string{"LOOMGATE_LOG_LEVEL=loud"}, []string{`LOOMGATE_LOG_LEVEL="loud": unknown level;`}},
		// slog's offsets from a level are no level an operator means.
		{[]string{"LOOMGATE_LOG_LEVEL=info+2"}, []string{`LOOMGATE_LOG_LEVEL="info+2": unknown level;`}},
		{[]string{"LOOMGATE_LOG_LEVEL=ERROR+100"}, []string{`LOOMGATE_LOG_LEVEL="ERROR+100": unknown level;`}},
		{[]string{"LOOMGATE_LOG_LEVEL=warn-4"}, []string{`LOOMGATE_LOG_LEVEL="warn-4": unknown level;`}},
		{[]string{"LOOMGATE_LOG_LEVEL=WARN"}, nil},
		{[]string{"LOOMGATE_LOG_LEVEL=Debug"}, nil},
		{[]string{"LOOMGATE_UPSTREAM_MEMORY_METRIC=jvm{area=heap}"}, []string{`LOOMGATE_UPSTREAM_MEMORY_METRIC="jvm{area=heap}":`}},
		{[]string{"LOOMGATE_REJECT_STATUS=429"}, nil},
		{[]string{"LOOMGATE_MAX_CONNS=0"}, nil},
		{[]string{"LOOMGATE_MODE=fixed", "LOOMGATE_QUEUE_POLICY=codel"}, nil},
		{[]string{"LOOMGATE_QUEUE_POLICY=lifo"}, []string{`LOOMGATE_QUEUE_POLICY="lifo": unknown queue policy`}},
		{[]string{"LOOMGATE_QUEUE_POLICY=codel", "LOOMGATE_QUEUE_TIMEOUT=2ms"}, []string{`LOOMGATE_QUEUE_TARGET (unset, default 5ms): want below LOOMGATE_QUEUE_TIMEOUT (2ms)`}},
		{[]string{"LOOMGATE_QUEUE_POLICY=codel", "LOOMGATE_QUEUE_INTERVAL=0s"}, []string{`LOOMGATE_QUEUE_INTERVAL="0s": want above 0`}},
		// With fifo the codel variables are checked as strictly, when set.
		{[]string{"LOOMGATE_MODE=fixed", "LOOMGATE_QUEUE_TARGET=0s"}, []string{`LOOMGATE_QUEUE_TARGET="0s": want above 0`}},
		{[]string{"LOOMGATE_MODE=fixed", "LOOMGATE_QUEUE_INTERVAL=0s"}, []string{`LOOMGATE_QUEUE_INTERVAL="0s": want above 0`}},
		{[]string{"LOOMGATE_QUEUE_TARGET=-5ms", "LOOMGATE_QUEUE_INTERVAL=-1s"}, []string{`LOOMGATE_QUEUE_TARGET="-5ms": want above 0`, `LOOMGATE_QUEUE_INTERVAL="-1s": want above 0`}},
		{[]string{"LOOMGATE_MODE=fixed", "LOOMGATE_QUEUE_TARGET=1m"}, []string{`LOOMGATE_QUEUE_TARGET="1m": want below LOOMGATE_QUEUE_TIMEOUT (30s)`}},
		{[]string{"LOOMGATE_QUEUE_TARGET=oops"}, []string{`LOOMGATE_QUEUE_TARGET="oops": not a duration`}},
		// A short QUEUE_TIMEOUT with fifo does not meet QUEUE_TARGET's
		// default, which is not in force.
		{[]string{"LOOMGATE_MODE=fixed", "LOOMGATE_QUEUE_TIMEOUT=2ms"}, nil},
		{[]string{"LOOMGATE_MAX_CONNS=5000"}, nil},
		// White space around or in a URL: some were taken into the path,
		// the rest called "not a URL".
		{[]string{"LOOMGATE_UPSTREAM_METRICS_URL=http://127.0.0.1:8081/metrics "}, []string{`LOOMGATE_UPSTREAM_METRICS_URL="http://127.0.0.1:8081/metrics ": has white space before or after the URL; remove it`}},
		{[]string{"LOOMGATE_UPSTREAM_METRICS_URL=http://127.0.0.1:8081/metrics\u00a0"}, []string{`LOOMGATE_UPSTREAM_METRICS_URL="http://127.0.0.1:8081/metrics\u00a0": has white space before or after`}},
		{[]string{"LOOMGATE_UPSTREAM_METRICS_URL=http://127.0.0.1:8081/me trics"}, []string{`LOOMGATE_UPSTREAM_METRICS_URL="http://127.0.0.1:8081/me trics": has white space inside`}},
		{[]string{"LOOMGATE_UPSTREAM= http://127.0.0.1:8081"}, []string{`LOOMGATE_UPSTREAM=" http://127.0.0.1:8081": has white space before or after the URL; remove it`}},
		{[]string{"LOOMGATE_UPSTREAM=http://127.0.0.1:8081\n"}, []string{`LOOMGATE_UPSTREAM="http://127.0.0.1:8081\n": has white space before or after the URL; remove it`}},
		{[]string{"LOOMGATE_MAX_CONNS=-1"}, []string{`LOOMGATE_MAX_CONNS="-1": want auto, or 0 (unbounded) to 10000000`}},
		{[]string{"LOOMGATE_MAX_CONNS=lots"}, []string{`LOOMGATE_MAX_CONNS="lots": not a whole number or auto`}},
		{[]string{"LOOMGATE_REJECT_STATUS=404"}, []string{`LOOMGATE_REJECT_STATUS="404": want 503 or 429`}},
		{[]string{"LOOMGATE_REJECT_STATUS=0"}, []string{`LOOMGATE_REJECT_STATUS="0": want 503 or 429`}},
		{[]string{"LOOMGATE_REJECT_STATUS=-503"}, []string{`LOOMGATE_REJECT_STATUS="-503": want 503 or 429`}},
		// Reported in the order of -h, not of discovery.
		{[]string{"LOOMGATE_PPROF=x", "LOOMGATE_MODE=x", "LOOMGATE_LISTEN=nope"}, []string{`LOOMGATE_LISTEN=`, `LOOMGATE_MODE=`, `LOOMGATE_PPROF=`}},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.env, " "), func(t *testing.T) {
			_, err := ParseEnv(tt.env)
			var ce *EnvError
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("ParseEnv = %v; want nil", err)
				}
				return
			}
			if !errors.As(err, &ce) {
				t.Fatalf("ParseEnv = %v; want an EnvError", err)
			}
			if len(ce.Problems) != len(tt.want) {
				t.Fatalf("problems = %q; want %d", ce.Problems, len(tt.want))
			}
			for i, w := range tt.want {
				if !strings.HasPrefix(ce.Problems[i], w) {
					t.Errorf("problem %d = %q; want it to start %q", i, ce.Problems[i], w)
				}
				if !strings.Contains(ce.Problems[i], "accepted: ") && !strings.Contains(ce.Problems[i], "unknown variable") {
					t.Errorf("problem %q does not say what is accepted", ce.Problems[i])
				}
			}
		})
	}
}

func FuzzParseEnv(f *testing.F) {
	f.Add("LOOMGATE_WORKERS", "200")
	f.Add("LOOMGATE_UPSTREAM", "http://[::1]:80")
	f.Add("LOOMGATE_QUEUE_TIMEOUT", "1h2m")
	f.Fuzz(func(t *testing.T, name, value string) {
		// Never a panic, and an error always names a variable.
		_, err := ParseEnv([]string{"LOOMGATE_MODE=fixed", name + "=" + value})
		var ce *EnvError
		if err != nil && (!errors.As(err, &ce) || !strings.HasPrefix(strings.ToUpper(ce.Problems[0]), "LOOMGATE_")) {
			t.Errorf("ParseEnv(%s=%q) = %v; want an EnvError naming a variable", name, value, err)
		}
	})
}

// TestListenClashNamesBothVariables: a clash of the two listeners is one
// problem, on LOOMGATE_ADMIN_LISTEN's line, that names LOOMGATE_LISTEN too,
// whichever of the two was set: either may be the one to change. A clash
// on every address with one address is a clash too, which listening found
// only after the configuration was taken.
func TestListenClashNamesBothVariables(t *testing.T) {
	for _, env := range [][]string{
		{"LOOMGATE_LISTEN=:7000", "LOOMGATE_ADMIN_LISTEN=:7000"},
		{"LOOMGATE_LISTEN=127.0.0.1:9090"},
		{"LOOMGATE_LISTEN=0.0.0.0:7000", "LOOMGATE_ADMIN_LISTEN=127.0.0.1:7000"},
		{"LOOMGATE_LISTEN=127.0.0.1:7000", "LOOMGATE_ADMIN_LISTEN=:7000"},
		{"LOOMGATE_LISTEN=localhost:7000", "LOOMGATE_ADMIN_LISTEN=127.0.0.1:7000"},
		{"LOOMGATE_LISTEN=[::]:7000", "LOOMGATE_ADMIN_LISTEN=[::1]:7000"},
	} {
		_, err := ParseEnv(env)
		var ee *EnvError
		if !errors.As(err, &ee) || len(ee.Problems) != 1 {
			t.Errorf("ParseEnv(%q) = %v; want one problem", env, err)
			continue
		}
		p := ee.Problems[0]
		if !strings.HasPrefix(p, "LOOMGATE_ADMIN_LISTEN") || !strings.Contains(p, "LOOMGATE_LISTEN") || strings.Contains(p, " Listen") {
			t.Errorf("ParseEnv(%q) = %q; want LOOMGATE_ADMIN_LISTEN's line naming LOOMGATE_LISTEN", env, p)
		}
	}
	for _, env := range [][]string{
		{"LOOMGATE_LISTEN=127.0.0.1:7000", "LOOMGATE_ADMIN_LISTEN=127.0.0.2:7000"},
		{"LOOMGATE_LISTEN=127.0.0.1:0", "LOOMGATE_ADMIN_LISTEN=127.0.0.1:0"},
		{"LOOMGATE_LISTEN=:7000", "LOOMGATE_ADMIN_LISTEN=:7001"},
	} {
		if _, err := ParseEnv(env); err != nil {
			t.Errorf("ParseEnv(%q) = %v; want nil", env, err)
		}
	}
}

// TestMainWarnsOfUnprefixedVariables: `MODE=fixed WORKERS=5 loomgate`
// started pass-through without a word. Main, run as the binary runs it,
// now names in one WARN line each loomgate variable found without its
// prefix while the prefixed one is unset, with the name it reads.
func TestMainWarnsOfUnprefixedVariables(t *testing.T) {
	// Ended already: the sidecar starts, logs, and drains at once.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	run := func(environ ...string) string {
		t.Helper()
		var stderr strings.Builder
		environ = append(environ, "LOOMGATE_LISTEN=127.0.0.1:0", "LOOMGATE_ADMIN_LISTEN=127.0.0.1:0", "PATH=/usr/bin", "HOME=/root")
		if code := Main(ctx, environ, io.Discard, &stderr, "test"); code != 0 {
			t.Fatalf("Main(%q) = %d; want 0\n%s", environ, code, stderr.String())
		}
		return stderr.String()
	}
	// QUEUE_SIZE is set both ways: the prefixed one is read, and the
	// other is nobody's business.
	log := run("MODE=fixed", "WORKERS=5", "BULKHEAD=3", "QUEUE_SIZE=7", "LOOMGATE_QUEUE_SIZE=5")
	const want = `level=WARN msg="ignored: loomgate reads only LOOMGATE_ variables; if these are meant for it, set the prefixed names" unprefixed=MODE,WORKERS,BULKHEAD set_instead=LOOMGATE_MODE,LOOMGATE_WORKERS,LOOMGATE_BULKHEAD`
	var lines []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "unprefixed=") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 1 || !strings.HasSuffix(lines[0], want) {
		t.Errorf("log's lines naming unprefixed variables = %q; want one, ending %s\nwhole log:\n%s", lines, want, log)
	}
	// What it warns of is what happened: the mode in force is unbounded.
	if !strings.Contains(log, "LOOMGATE_MODE=unbounded") {
		t.Errorf("log lacks LOOMGATE_MODE=unbounded, the mode in force:\n%s", log)
	}
	if log := run("LOOMGATE_MODE=fixed", "MODE=prod"); strings.Contains(log, "unprefixed=") {
		t.Errorf("MODE beside LOOMGATE_MODE is warned of; want silence:\n%s", log)
	}
}
