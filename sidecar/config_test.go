package sidecar

import (
	"slices"
	"testing"

	"github.com/loomgate/loomgate/limiter"
)

func TestSize(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"0", 0, true}, {"1048576", 1 << 20, true}, {"16MiB", 16 << 20, true}, {"16 MiB", 16 << 20, true},
		{"512Ki", 512 << 10, true}, {"2GiB", 2 << 30, true}, {"1GB", 1e9, true}, {"10kb", 10e3, true},
		{"-1", -1, true}, {"", 0, false}, {"MiB", 0, false}, {"12 parsecs", 0, false},
		{"9223372036854775807GiB", 0, false}, {"1.5GiB", 3 << 29, true}, {"0.5Gi", 1 << 29, true},
		{"1.5", 0, false}, {"0.1KiB", 0, false}, {"1G", 0, false},
	}
	for _, tt := range tests {
		var b Size
		err := b.UnmarshalText([]byte(tt.in))
		if (err == nil) != tt.ok || (tt.ok && int64(b) != tt.want) {
			t.Errorf("Size(%q) = %d, %v; want %d, ok=%v", tt.in, b, err, tt.want, tt.ok)
		}
	}
	if got := Size(16 << 20).String(); got != "16MiB" {
		t.Errorf("String() = %q; want 16MiB", got)
	}
}

func FuzzSize(f *testing.F) {
	for _, s := range []string{"16MiB", "0", "-5", "1e3", "99999999999999999999", "7 Gi"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var b Size
		if err := b.UnmarshalText([]byte(s)); err != nil {
			return
		}
		// Whatever parses round-trips through its own rendering.
		var again Size
		if err := again.UnmarshalText([]byte(b.String())); err != nil || again != b {
			t.Errorf("%q -> %d -> %q -> %d, %v", s, b, b.String(), again, err)
		}
	})
}

func TestProbeOn(t *testing.T) {
	tests := []struct {
		env  []string
		want bool
	}{
		{nil, false},
		{[]string{"LOOMGATE_MODE=fixed"}, false},
		{[]string{"LOOMGATE_MODE=adaptive"}, true},
		{[]string{"LOOMGATE_MODE=adaptive", "LOOMGATE_PROBE=off"}, false},
		{[]string{"LOOMGATE_MODE=unbounded", "LOOMGATE_PROBE=on"}, true},
		{[]string{"LOOMGATE_MODE=fixed", "LOOMGATE_PROBE=on"}, true},
		// A dry run changes nothing: auto is off there.
		{[]string{"LOOMGATE_MODE=adaptive", "LOOMGATE_DRY_RUN=true"}, false},
	}
	for _, tt := range tests {
		cfg, err := ParseEnv(tt.env)
		if err != nil {
			t.Fatalf("ParseEnv(%q) = %v", tt.env, err)
		}
		if got := cfg.ProbeOn(); got != tt.want {
			t.Errorf("ProbeOn() with %q = %v; want %v", tt.env, got, tt.want)
		}
		if got := cfg.Limiter().Probe; got != tt.want {
			t.Errorf("Limiter().Probe with %q = %v; want %v", tt.env, got, tt.want)
		}
	}
}

func TestParsePriorities(t *testing.T) {
	cfg, err := ParseEnv([]string{"LOOMGATE_ROUTES=checkout=/checkout,batch=/batch,search=/search",
		"LOOMGATE_PRIORITIES=checkout=critical,batch=sheddable", "LOOMGATE_SHARES=critical=50,sheddable=10",
		"LOOMGATE_PRIORITY_HEADER=x-priority", "LOOMGATE_FLOW_KEY=header:x-tenant-id"})
	if err != nil {
		t.Fatal(err)
	}
	routes := cfg.Routes.Classes()
	p, problems := parsePriorities(cfg, routes)
	if len(problems) > 0 || !p.On() {
		t.Fatalf("problems %v, on %v", problems, p.On())
	}
	// Classes by index: other, checkout, batch, search.
	want := []limiter.Level{limiter.Default, limiter.Critical, limiter.Sheddable, limiter.Default}
	if !slices.Equal(p.Levels, want) {
		t.Errorf("Levels = %v; want %v", p.Levels, want)
	}
	if p.Shares[limiter.Critical] != 50 || p.Shares[limiter.Sheddable] != 10 || p.Shares[limiter.Default] != 0 {
		t.Errorf("Shares = %v; want critical 50, sheddable 10", p.Shares)
	}
	if p.Header != "X-Priority" || p.FlowClient || p.FlowHeader != "X-Tenant-Id" {
		t.Errorf("Header %q, flow by client %v, by header %q; want X-Priority, header X-Tenant-Id", p.Header, p.FlowClient, p.FlowHeader)
	}
	none, _ := ParseEnv(nil)
	if p, _ := parsePriorities(none, routes); p.On() {
		t.Errorf("no variables: %+v; want none", p)
	}
}
