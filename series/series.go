// Package series picks series from a Prometheus exposition by name and
// labels, the way PromQL writes an instant vector selector. The sidecar
// reads its upstream's memory through one (LOOMGATE_UPSTREAM_MEMORY_METRIC).
package series

import (
	"errors"
	"fmt"
	"strings"

	dto "github.com/prometheus/client_model/go"
)

// ErrSelector is returned, wrapped with what is wrong, by Parse.
var ErrSelector = errors.New("series: bad selector")

// Selector picks series from a Prometheus exposition by name and labels.
// It is written the way PromQL writes an instant vector selector, limited
// to exact matches: name{label="value",other!="value"}.
type Selector struct {
	// Name is the metric name. Required.
	Name string
	// Matchers narrow the series; a series matches when all of them do.
	Matchers []Matcher
}

// Matcher compares one label with a value. A label the series lacks has
// the value "", as in PromQL.
type Matcher struct {
	Label, Value string
	// Negate makes it a != matcher.
	Negate bool
}

// Parse reads a selector such as process_resident_memory_bytes or
// jvm_memory_used_bytes{area="heap"}. Label values are double-quoted, with
// \\, \" and \n as escapes; = and != are the only operators.
func Parse(s string) (Selector, error) {
	p := selectorParser{s: s}
	sel, err := p.parse()
	if err != nil {
		// The input is left out: whoever passed it knows it, and names it
		// better (a configuration line, say).
		return Selector{}, fmt.Errorf("%w: %s", ErrSelector, err)
	}
	return sel, nil
}

// UnmarshalText is Parse, for configuration parsers; the error
// says what is wrong without the package's prefix.
func (s *Selector) UnmarshalText(text []byte) error {
	sel, err := Parse(string(text))
	if err != nil {
		return errors.New(strings.TrimPrefix(err.Error(), ErrSelector.Error()+": "))
	}
	*s = sel
	return nil
}

// MustParse is Parse for selectors written in the program;
// it panics on an error.
func MustParse(s string) Selector {
	sel, err := Parse(s)
	if err != nil {
		panic(err)
	}
	return sel
}

type selectorParser struct {
	s string
	i int
}

func (p *selectorParser) parse() (Selector, error) {
	var sel Selector
	p.space()
	sel.Name = p.name(true)
	if sel.Name == "" {
		return sel, errors.New("want a metric name first, such as process_resident_memory_bytes")
	}
	p.space()
	if p.eof() {
		return sel, nil
	}
	if !p.take("{") {
		return sel, fmt.Errorf("unexpected %q after the name; label matchers go in braces", p.s[p.i:])
	}
	for {
		p.space()
		if p.take("}") {
			break
		}
		label := p.name(false)
		if label == "" {
			return sel, fmt.Errorf("want a label name at %q", p.rest())
		}
		p.space()
		var m Matcher
		switch {
		case p.take("=~"), p.take("!~"):
			return sel, errors.New("regular expression matchers are not supported; use = or !=")
		case p.take("!="):
			m.Negate = true
		case p.take("="):
		default:
			return sel, fmt.Errorf("want = or != after %s", label)
		}
		p.space()
		value, err := p.quoted()
		if err != nil {
			return sel, fmt.Errorf("value of %s: %s", label, err)
		}
		m.Label, m.Value = label, value
		sel.Matchers = append(sel.Matchers, m)
		p.space()
		if p.take(",") {
			continue
		}
		if p.take("}") {
			break
		}
		return sel, fmt.Errorf("want , or } at %q", p.rest())
	}
	p.space()
	if !p.eof() {
		return sel, fmt.Errorf("unexpected %q after the closing brace", p.rest())
	}
	return sel, nil
}

func (p *selectorParser) eof() bool { return p.i >= len(p.s) }

func (p *selectorParser) rest() string {
	if p.eof() {
		return "the end"
	}
	return p.s[p.i:]
}

func (p *selectorParser) space() {
	for !p.eof() && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

func (p *selectorParser) take(tok string) bool {
	if strings.HasPrefix(p.s[p.i:], tok) {
		p.i += len(tok)
		return true
	}
	return false
}

// name reads a metric name ([a-zA-Z_:][a-zA-Z0-9_:]*) or, without colons,
// a label name.
func (p *selectorParser) name(colons bool) string {
	start := p.i
	for !p.eof() {
		c := p.s[p.i]
		ok := c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' ||
			p.i > start && '0' <= c && c <= '9' || colons && c == ':'
		if !ok {
			break
		}
		p.i++
	}
	return p.s[start:p.i]
}

// quoted reads a double-quoted label value with the text format's escapes.
func (p *selectorParser) quoted() (string, error) {
	if !p.take(`"`) {
		return "", errors.New(`want a value in double quotes, such as "heap"`)
	}
	var b strings.Builder
	for !p.eof() {
		c := p.s[p.i]
		p.i++
		switch c {
		case '"':
			return b.String(), nil
		case '\\':
			if p.eof() {
				return "", errors.New("unterminated escape")
			}
			e := p.s[p.i]
			p.i++
			switch e {
			case '\\', '"':
				b.WriteByte(e)
			case 'n':
				b.WriteByte('\n')
			default:
				return "", fmt.Errorf(`unknown escape \%c; want \\, \" or \n`, e)
			}
		default:
			b.WriteByte(c)
		}
	}
	return "", errors.New("missing closing quote")
}

// String writes the selector so that Parse reads it back.
func (s Selector) String() string {
	if len(s.Matchers) == 0 {
		return s.Name
	}
	var b strings.Builder
	b.WriteString(s.Name)
	b.WriteByte('{')
	for i, m := range s.Matchers {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(m.Label)
		if m.Negate {
			b.WriteString("!=")
		} else {
			b.WriteByte('=')
		}
		b.WriteString(quoteLabelValue(m.Value))
	}
	b.WriteByte('}')
	return b.String()
}

func quoteLabelValue(v string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	return `"` + r.Replace(v) + `"`
}

// match reports whether a series with these labels is selected.
func (s Selector) match(labels []*dto.LabelPair) bool {
	for _, m := range s.Matchers {
		v := ""
		for _, l := range labels {
			if l.GetName() == m.Label {
				v = l.GetValue()
				break
			}
		}
		if (v == m.Value) == m.Negate {
			return false
		}
	}
	return true
}

// Sum adds up the values of the selected series among families (as
// expfmt's parsers return them) and reports how many there were. Gauges,
// counters and untyped series have a value; histograms and summaries are
// skipped, having none.
func (s Selector) Sum(families map[string]*dto.MetricFamily) (sum float64, series int) {
	mf, ok := families[s.Name]
	if !ok {
		return 0, 0
	}
	for _, m := range mf.GetMetric() {
		if !s.match(m.GetLabel()) {
			continue
		}
		var v float64
		switch {
		case m.Gauge != nil:
			v = m.GetGauge().GetValue()
		case m.Counter != nil:
			v = m.GetCounter().GetValue()
		case m.Untyped != nil:
			v = m.GetUntyped().GetValue()
		default:
			continue
		}
		sum += v
		series++
	}
	return sum, series
}
