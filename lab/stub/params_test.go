package stub

import (
	"strconv"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

func itoa(n int64) string  { return strconv.FormatInt(n, 10) }
func utoa(n uint64) string { return strconv.FormatUint(n, 10) }

func TestParseUint(t *testing.T) {
	tests := []struct {
		in      string
		max     int64
		want    int64
		wantErr error
	}{
		{"0", 10, 0, nil},
		{"10", 10, 10, nil},
		{"007", 10, 7, nil},
		{"11", 10, 0, errTooLarge},
		{"600000", maxMillis, 600000, nil},
		{"600001", maxMillis, 0, errTooLarge},
		{"10000000000", maxIters, maxIters, nil},
		{"99999999999999999999999999", maxIters, 0, errTooLarge},
		{"", 10, 0, errNotWhole},
		{"-1", 10, 0, errNotWhole},
		{"+1", 10, 0, errNotWhole},
		{"1 ", 10, 0, errNotWhole},
		{"1e3", 10000, 0, errNotWhole},
		{"0x10", 100, 0, errNotWhole},
	}
	for _, tt := range tests {
		got, err := parseUint([]byte(tt.in), tt.max)
		if got != tt.want || err != tt.wantErr {
			t.Errorf("parseUint(%q, %d) = %d, %v; want %d, %v", tt.in, tt.max, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestParseQuery(t *testing.T) {
	tests := []struct {
		r       route
		query   string
		n, ms   int64
		wantBad string
	}{
		{routeWait, "ms=200", 0, 200, ""},
		{routeDB, "ms=5&other=x", 0, 5, ""},
		{routePinned, "ms=", 0, 0, `bad ms ""`},
		{routeCPU, "iters=1000000", 1000000, 0, ""},
		{routeMem, "kb=64&ms=100", 64, 100, ""},
		{routeMem, "kb=64", 64, 0, ""},
		{routeMem, "ms=100", 0, 0, "missing kb"},
		{routeMixed, "ms=nonsense", 0, 0, ""}, // /mixed takes no parameter
		{routeWait, "MS=5", 0, 0, "missing ms"},
	}
	for _, tt := range tests {
		var args fasthttp.Args
		args.Parse(tt.query)
		n, ms, bad := parseQuery(tt.r, &args)
		if n != tt.n || ms != tt.ms || (tt.wantBad == "") != (bad == "") || !strings.Contains(bad, tt.wantBad) {
			t.Errorf("parseQuery(%s, %q) = %d, %d, %q; want %d, %d, %q", routeLabels[tt.r], tt.query, n, ms, bad, tt.n, tt.ms, tt.wantBad)
		}
	}
}

// FuzzParseQuery feeds arbitrary query strings, as a client may send them,
// to the parameter parsing of every endpoint.
func FuzzParseQuery(f *testing.F) {
	for _, s := range []string{"ms=200", "iters=1000", "kb=64&ms=10", "ms=", "ms=-1", "ms=1e9", "kb=%31%30", "ms=600001", "ms=1&ms=2", "kb"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, query string) {
		var args fasthttp.Args
		args.Parse(query)
		for r := routeOther; r < numRoutes; r++ {
			n, ms, bad := parseQuery(r, &args)
			if bad != "" {
				if n != 0 || ms != 0 {
					t.Errorf("parseQuery(%s, %q) = %d, %d with error %q; want zeros", routeLabels[r], query, n, ms, bad)
				}
				if !strings.HasSuffix(bad, "\n") || !strings.Contains(bad, "want") {
					t.Errorf("parseQuery(%s, %q) error %q; want a line saying what is accepted", routeLabels[r], query, bad)
				}
				continue
			}
			if n < 0 || n > maxIters || ms < 0 || ms > maxMillis {
				t.Errorf("parseQuery(%s, %q) = %d, %d; want values within bounds", routeLabels[r], query, n, ms)
			}
			if r == routeMem && n > maxKB {
				t.Errorf("parseQuery(/mem, %q) kb = %d; want at most %d", query, n, maxKB)
			}
			// Whatever was accepted must be the decimal number the client
			// sent.
			if r == routeWait {
				if raw := args.Peek("ms"); itoa(ms) != strings.TrimLeft(string(raw), "0") && !(ms == 0 && strings.Trim(string(raw), "0") == "") {
					t.Errorf("parseQuery(/wait, %q) ms = %d; client sent %q", query, ms, raw)
				}
			}
		}
	})
}

func BenchmarkParseQuery(b *testing.B) {
	var args fasthttp.Args
	args.Parse("kb=256&ms=1000")
	b.ReportAllocs()
	for b.Loop() {
		if _, _, bad := parseQuery(routeMem, &args); bad != "" {
			b.Fatal(bad)
		}
	}
}
