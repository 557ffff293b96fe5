package stub

import (
	"errors"
	"math/rand/v2"
	"strconv"

	"github.com/valyala/fasthttp"
)

// Bounds of the query parameters. They keep one request from tying up the
// stub for longer than an experiment lasts or allocating more than a test
// machine holds.
const (
	maxMillis = 600_000        // 10 minutes
	maxIters  = 10_000_000_000 // tens of seconds of CPU
	maxKB     = 1 << 20        // 1 GiB
	maxPool   = 1_000_000
)

var (
	errMissing  = errors.New("missing")
	errNotWhole = errors.New("not a whole number")
	errTooLarge = errors.New("too large")
)

// parseUint reads a non-negative decimal integer no larger than max.
//
// It works on the raw bytes fasthttp hands out because strconv.ParseInt on a
// converted string allocates on the hot path of every request.
func parseUint(b []byte, max int64) (int64, error) {
	if len(b) == 0 {
		return 0, errNotWhole
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, errNotWhole
		}
		// Checking against max before each step also rules out overflow,
		// since max is far below the int64 range divided by ten.
		n = n*10 + int64(c-'0')
		if n > max {
			return 0, errTooLarge
		}
	}
	return n, nil
}

// param is one query parameter of an endpoint, with its accepted range.
type param struct {
	name string
	max  int64
	unit string // what the number counts, for the error message
}

var (
	paramMS    = param{name: "ms", max: maxMillis, unit: "milliseconds"}
	paramTo    = param{name: "to", max: maxMillis, unit: "milliseconds"}
	paramIters = param{name: "iters", max: maxIters, unit: "iterations"}
	paramKB    = param{name: "kb", max: maxKB, unit: "KiB"}
	paramSize  = param{name: "size", max: maxPool, unit: "workers"}
)

// badParam is the 400 body for a parameter that is missing or malformed.
// Only the error path builds it, so it may allocate.
func badParam(p param, raw []byte, err error) string {
	if errors.Is(err, errMissing) {
		return "missing " + p.name + ": want " + p.name + "=N, a whole number of " +
			p.unit + " from 0 to " + strconv.FormatInt(p.max, 10) + "\n"
	}
	return "bad " + p.name + " " + strconv.Quote(string(raw)) + ": " + err.Error() +
		"; want a whole number of " + p.unit + " from 0 to " + strconv.FormatInt(p.max, 10) + "\n"
}

// parseQuery reads the parameters route r takes from args: ms for /wait,
// /db and /pinned, iters for /cpu, kb and an optional ms for /mem. On
// failure it returns the body of the 400 answer, naming the parameter and
// what is accepted; on success bad is empty and nothing is allocated.
func parseQuery(r route, args *fasthttp.Args) (n, ms int64, bad string) {
	switch r {
	case routeWait, routeDB, routePinned:
		if ms, bad = arg(args, paramMS, true); bad == "" {
			ms, bad = spread(args, ms)
		}
	case routeCPU:
		n, bad = arg(args, paramIters, true)
	case routeMem:
		if n, bad = arg(args, paramKB, true); bad == "" {
			ms, bad = arg(args, paramMS, false)
		}
	}
	if bad != "" {
		return 0, 0, bad
	}
	return n, ms, ""
}

// spread draws the delay from [ms, to] when the optional to is given: real
// service times are spread, a median several times the minimum.
func spread(args *fasthttp.Args, ms int64) (int64, string) {
	to, bad := arg(args, paramTo, false)
	switch {
	case bad != "" || !args.Has(paramTo.name):
		return ms, bad
	case to < ms:
		return 0, "bad to " + strconv.FormatInt(to, 10) + ": want at least ms, " + strconv.FormatInt(ms, 10) + "\n"
	}
	return ms + rand.Int64N(to-ms+1), ""
}

// arg reads the parameter p from args. A missing parameter is 0 unless
// required.
func arg(args *fasthttp.Args, p param, required bool) (int64, string) {
	raw := args.Peek(p.name)
	if raw == nil && !args.Has(p.name) {
		if required {
			return 0, badParam(p, nil, errMissing)
		}
		return 0, ""
	}
	v, err := parseUint(raw, p.max)
	if err != nil {
		return 0, badParam(p, raw, err)
	}
	return v, ""
}
