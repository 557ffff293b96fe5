package main

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestDefaults(t *testing.T) {
	cfg, err := parseConfig(nil)
	if err != nil {
		t.Fatalf("parseConfig(nil) = %v; want the defaults to be valid", err)
	}
	want := config{
		Listen: ":8080", AdminListen: ":9090", Upstream: "http://127.0.0.1:8081", Mode: "unbounded",
		Workers: 200, QueueSize: 10000, QueueTimeout: 30 * time.Second, UpstreamTimeout: 60 * time.Second,
		HeaderTimeout: 10 * time.Second, BodyTimeout: 10 * time.Second,
		MaxBodyBytes: 16 << 20, DrainTimeout: 30 * time.Second, ServerTiming: true, AccessLog: "off",
		LogLevel: "info", UpstreamMemoryMetric: "process_resident_memory_bytes",
	}
	if cfg != want {
		t.Errorf("defaults = %+v\nwant %+v", cfg, want)
	}
}

func TestParseConfigProblems(t *testing.T) {
	tests := []struct {
		env  []string
		want []string // each problem's start, in order
	}{
		{[]string{"LOOMGATE_MODE=fixed", "LOOMGATE_WORKERS=50", "LOOMGATE_QUEUE_SIZE=0"}, nil},
		{[]string{"LOOMGATE_BULKHEAD=64", "LOOMGATE_BULKHEAD_WAIT=250ms", "LOOMGATE_MAX_INFLIGHT_BYTES=512MiB"}, nil},
		{[]string{"LOOMGATE_WORKERS=abc"}, []string{`LOOMGATE_WORKERS="abc": not a number`}},
		{[]string{"LOOMGATE_MODE=fixed", "LOOMGATE_QUEUE_TIMEOUT=100"}, []string{`LOOMGATE_QUEUE_TIMEOUT="100": a duration needs a unit`}},
		{[]string{"LOOMGATE_UPSTREAM=http://:80"}, []string{`LOOMGATE_UPSTREAM="http://:80": no host`}},
		{[]string{"LOOMGATE_UPSTREAM=http://u:p@svc:80"}, []string{`LOOMGATE_UPSTREAM="http://u:p@svc:80": user information`}},
		// The other mode's settings are accepted, and checked as strictly.
		{[]string{"LOOMGATE_MODE=fixed", "LOOMGATE_BULKHEAD=64", "LOOMGATE_BULKHEAD_WAIT=1s"}, nil},
		{[]string{"LOOMGATE_QUEUE_SIZE=5", "LOOMGATE_WORKERS=20"}, nil},
		{[]string{"LOOMGATE_MODE=fixed", "LOOMGATE_BULKHEAD_WAIT=1s"}, []string{`LOOMGATE_BULKHEAD_WAIT="1s": has no effect without LOOMGATE_BULKHEAD`}},
		{[]string{"LOOMGATE_WORKERS=0"}, []string{`LOOMGATE_WORKERS="0": out of range`}},
		{[]string{"LOOMGATE_LOG_LEVEL=loud", "LOOMGATE_PPROF=maybe"}, []string{`LOOMGATE_LOG_LEVEL="loud"`, `LOOMGATE_PPROF="maybe"`}},
		{[]string{"LOOMGATE_MAX_BODY_BYTES=0"}, []string{`LOOMGATE_MAX_BODY_BYTES="0": out of range`}},
		{[]string{"LOOMGATE_UPSTREAM_METRICS_URL=ftp://x/metrics"}, []string{`LOOMGATE_UPSTREAM_METRICS_URL="ftp://x/metrics"`}},
		{[]string{"LOOMGATE_QUEUE_SIZ=1"}, []string{`LOOMGATE_QUEUE_SIZ="1": unknown variable (did you mean LOOMGATE_QUEUE_SIZE?)`}},
		// Reported in the order of -h, not of discovery.
		{[]string{"LOOMGATE_PPROF=x", "LOOMGATE_MODE=x", "LOOMGATE_LISTEN=nope"}, []string{`LOOMGATE_LISTEN=`, `LOOMGATE_MODE=`, `LOOMGATE_PPROF=`}},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.env, " "), func(t *testing.T) {
			_, err := parseConfig(tt.env)
			var ce *configError
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("parseConfig = %v; want nil", err)
				}
				return
			}
			if !errors.As(err, &ce) {
				t.Fatalf("parseConfig = %v; want a configError", err)
			}
			if len(ce.problems) != len(tt.want) {
				t.Fatalf("problems = %q; want %d", ce.problems, len(tt.want))
			}
			for i, w := range tt.want {
				if !strings.HasPrefix(ce.problems[i], w) {
					t.Errorf("problem %d = %q; want it to start %q", i, ce.problems[i], w)
				}
				if !strings.Contains(ce.problems[i], "accepted: ") && !strings.Contains(ce.problems[i], "unknown variable") {
					t.Errorf("problem %q does not say what is accepted", ce.problems[i])
				}
			}
		})
	}
}

func TestByteSize(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"0", 0, true}, {"1048576", 1 << 20, true}, {"16MiB", 16 << 20, true}, {"16 MiB", 16 << 20, true},
		{"512Ki", 512 << 10, true}, {"2GiB", 2 << 30, true}, {"1GB", 1e9, true}, {"10kb", 10e3, true},
		{"-1", -1, true}, {"", 0, false}, {"MiB", 0, false}, {"12 parsecs", 0, false},
		{"9223372036854775807GiB", 0, false}, {"1.5GiB", 0, false},
	}
	for _, tt := range tests {
		var b byteSize
		err := b.UnmarshalText([]byte(tt.in))
		if (err == nil) != tt.ok || (tt.ok && int64(b) != tt.want) {
			t.Errorf("byteSize(%q) = %d, %v; want %d, ok=%v", tt.in, b, err, tt.want, tt.ok)
		}
	}
	if got := byteSize(16 << 20).String(); got != "16MiB" {
		t.Errorf("String() = %q; want 16MiB", got)
	}
}

func FuzzByteSize(f *testing.F) {
	for _, s := range []string{"16MiB", "0", "-5", "1e3", "99999999999999999999", "7 Gi"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var b byteSize
		if err := b.UnmarshalText([]byte(s)); err != nil {
			return
		}
		// Whatever parses round-trips through its own rendering.
		var again byteSize
		if err := again.UnmarshalText([]byte(b.String())); err != nil || again != b {
			t.Errorf("%q -> %d -> %q -> %d, %v", s, b, b.String(), again, err)
		}
	})
}

func FuzzParseConfig(f *testing.F) {
	f.Add("LOOMGATE_WORKERS", "200")
	f.Add("LOOMGATE_UPSTREAM", "http://[::1]:80")
	f.Add("LOOMGATE_QUEUE_TIMEOUT", "1h2m")
	f.Fuzz(func(t *testing.T, name, value string) {
		// Never a panic, and an error always names a variable.
		_, err := parseConfig([]string{"LOOMGATE_MODE=fixed", name + "=" + value})
		var ce *configError
		if err != nil && (!errors.As(err, &ce) || !strings.HasPrefix(ce.problems[0], "LOOMGATE_")) {
			t.Errorf("parseConfig(%s=%q) = %v; want a configError naming a variable", name, value, err)
		}
	})
}
