package sidecar

import (
	"fmt"
	"net/textproto"
	"slices"
	"strconv"
	"strings"

	"github.com/loomgate/loomgate/internal/admission"
	"github.com/loomgate/loomgate/limiter"
	"github.com/loomgate/loomgate/route"
)

// Priorities is what LOOMGATE_PRIORITIES, LOOMGATE_SHARES,
// LOOMGATE_PRIORITY_HEADER and LOOMGATE_FLOW_KEY configure: how admission
// tells a request's level and flow, and each level's guaranteed share of
// the limit. The zero value is none: one FIFO queue, as without them.
type Priorities struct {
	admission.Priorities
	// Shares is each level's guaranteed share of the limit, in percent.
	Shares [limiter.NumLevels]int
}

// On reports whether any of them is set: otherwise admission keeps its
// one FIFO queue.
func (p Priorities) On() bool {
	return p.Priorities.On() || p.Shares != [limiter.NumLevels]int{}
}

// parsePriorities reads the four variables, with the route classes they
// name. Each problem names its variable by the Config field.
func parsePriorities(c Config, routes *route.Classes) (Priorities, []problem) {
	var p Priorities
	var problems []problem
	bad := func(field, format string, args ...any) {
		problems = append(problems, problem{field, fmt.Sprintf(format, args...)})
	}
	if s := strings.TrimSpace(c.Priorities); s != "" {
		names := routes.Names()
		if len(names) <= 1 {
			bad("Priorities", "is %s; it names route classes, so it needs LOOMGATE_ROUTES", c.Priorities)
		} else {
			p.Levels = make([]limiter.Level, len(names))
			for i := range p.Levels {
				p.Levels[i] = limiter.Default
			}
			index := map[string]int{}
			for i, n := range names {
				index[n] = i
			}
			for item := range strings.SplitSeq(s, ",") {
				class, level, ok := strings.Cut(strings.TrimSpace(item), "=")
				class, level = strings.TrimSpace(class), strings.TrimSpace(level)
				i, known := index[class]
				var lv limiter.Level
				switch {
				case !ok:
					bad("Priorities", "%q is not class=level", item)
				case !known:
					bad("Priorities", "%q names no class of LOOMGATE_ROUTES (%s)", class, strings.Join(names, ", "))
				case lv.UnmarshalText([]byte(level)) != nil:
					bad("Priorities", "%q: level %q; want critical, high, default or sheddable", item, level)
				default:
					p.Levels[i] = lv
				}
			}
		}
	}
	if s := strings.TrimSpace(c.Shares); s != "" {
		total := 0
		for item := range strings.SplitSeq(s, ",") {
			level, pct, ok := strings.Cut(strings.TrimSpace(item), "=")
			var lv limiter.Level
			n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(pct), "%"))
			switch {
			case !ok:
				bad("Shares", "%q is not level=percent", item)
			case lv.UnmarshalText([]byte(strings.TrimSpace(level))) != nil:
				bad("Shares", "%q: level %q; want critical, high, default or sheddable", item, strings.TrimSpace(level))
			case err != nil || n < 1 || n > 100:
				bad("Shares", "%q: want a share from 1 to 100 percent", item)
			default:
				p.Shares[lv] = n
				total += n
			}
		}
		if total > 100 {
			bad("Shares", "is %s; the shares add up to %d%%, more than the whole limit", c.Shares, total)
		}
	}
	if h := strings.TrimSpace(c.PriorityHeader); h != "" {
		if !validHeaderName(h) {
			bad("PriorityHeader", "is %s; want a header name (letters, digits, '-')", c.PriorityHeader)
		}
		p.Header = textproto.CanonicalMIMEHeaderKey(h)
	}
	if p.Header == "" {
		// A share for a level no request can have would stay idle: no
		// class has the level, and no header sets it.
		for lv, n := range p.Shares {
			if n > 0 && limiter.Level(lv) != limiter.Default && !slices.Contains(p.Levels, limiter.Level(lv)) {
				bad("Shares", "gives %s a share, but no request can be %[1]s: give a class that level in LOOMGATE_PRIORITIES, or set LOOMGATE_PRIORITY_HEADER", limiter.Level(lv))
			}
		}
	}
	switch f := strings.TrimSpace(c.FlowKey); {
	case f == "":
	case f == "client":
		p.FlowClient = true
	case strings.HasPrefix(f, "header:") && validHeaderName(strings.TrimPrefix(f, "header:")):
		p.FlowHeader = textproto.CanonicalMIMEHeaderKey(strings.TrimPrefix(f, "header:"))
	default:
		bad("FlowKey", "is %s; want client, or header:<name>, e.g. header:X-Tenant-Id", c.FlowKey)
	}
	return p, problems
}

// problem is one field's problem, for Validate to name by its variable.
type problem struct{ field, text string }

// validHeaderName reports whether h is a header's name loomgate will look
// up: letters, digits and '-', as every client library writes them.
func validHeaderName(h string) bool {
	if h == "" {
		return false
	}
	for _, c := range h {
		if !(c == '-' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return false
		}
	}
	return true
}
