// Package route sorts requests into a bounded set of route classes, so
// that what is measured per route (service times, baselines, labels) is
// compared like with like: a cheap and an expensive endpoint, or one
// behind a pool and one not, each have their own figures. The advice keys
// its window by class; any part that needs a per-route label or limit
// classifies through the same Classes.
package route

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"unicode"
	"unicode/utf8"
)

// Max bounds the route classes: a label, a window and a baseline
// each, whatever paths clients try. Requests past it go to the class
// Other.
const Max = 32

// Other is the class of requests that match no route, and of new ones
// once Max are taken.
const Other = "other"

// Classes classifies requests into a bounded set of route classes, so that
// service times are compared like with like: a cheap and an expensive
// endpoint, or one behind a pool and one not, each have their own baseline.
//
// The zero value classifies automatically, by method and first path
// segment ("GET /users"), the first Max seen each a class of their
// own for the life of the process; a method or segment that is not
// printable UTF-8 is Other. Parse reads named patterns
// instead. Classes is safe for concurrent use.
type Classes struct {
	patterns []pattern // nil: automatic

	mu   sync.Mutex   // serialises additions of automatic classes
	auto atomic.Value // map[string]int, copied on each addition
	// names are the classes' names by index: Other first, then the
	// patterns' or the automatic classes in the order seen. Appended under
	// mu, read through namesSnapshot.
	names atomic.Value // []string
}

// pattern is one named route of LOOMGATE_ROUTES.
type pattern struct {
	name     string
	method   []byte   // nil: any
	segments [][]byte // "*" matches any one segment
}

// Parse reads route classes written as comma-separated name=pattern
// pairs, tried in order, the first match winning:
//
//	checkout=POST /api/checkout, search=/api/search, user=/users/*/orders
//
// A pattern is an optional method and a path: the request's path matches
// when it starts with the pattern's segments, "*" standing for any one
// segment. Names are letters, digits, '_' and '-', at most 32 characters;
// "other" is taken. An empty string is the automatic classification.
func Parse(s string) (*Classes, error) {
	var p Patterns
	if err := p.UnmarshalText([]byte(s)); err != nil {
		return nil, err
	}
	return p.Classes(), nil
}

// Patterns are route classes as Parse reads them, read and checked once:
// named patterns, or none for the automatic classification (the zero
// value). A configuration holds them, so that a mistake is reported with
// the configuration's other problems, and Classes builds from them
// without reading them again.
type Patterns struct {
	text     string
	patterns []pattern
}

// UnmarshalText reads text as Parse does.
func (p *Patterns) UnmarshalText(text []byte) error {
	s := string(text)
	*p = Patterns{text: s}
	if strings.TrimSpace(s) == "" {
		return nil
	}
	seen := map[string]bool{Other: true}
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		name, spec, ok := strings.Cut(item, "=")
		name, spec = strings.TrimSpace(name), strings.TrimSpace(spec)
		switch {
		case !ok || spec == "":
			return fmt.Errorf("%q is not name=pattern", item)
		case !validName(name):
			return fmt.Errorf("%q: a name is 1 to 32 letters, digits, '_' or '-'", name)
		case seen[name]:
			return fmt.Errorf("%q is named twice (or is %q, which is taken)", name, Other)
		}
		seen[name] = true
		pt := pattern{name: name}
		// A method comes first, if any; a path starts with "/".
		if method, path, ok := strings.Cut(spec, " "); ok && !strings.HasPrefix(spec, "/") {
			pt.method, spec = []byte(strings.ToUpper(method)), strings.TrimSpace(path)
		}
		if !strings.HasPrefix(spec, "/") {
			return fmt.Errorf("%s=%s: the path must start with /", name, spec)
		}
		// A path is matched against a request's path, which has no query
		// or fragment (Class cuts them off) and no space or control byte
		// (the request line cannot carry one): a pattern with one matches
		// nothing, and would count nothing without saying so.
		if i := strings.IndexFunc(spec, func(r rune) bool {
			return r == '?' || r == '#' || unicode.IsSpace(r) || unicode.IsControl(r)
		}); i >= 0 {
			c, _ := utf8.DecodeRuneInString(spec[i:])
			return fmt.Errorf("%s=%s: the path has %q, which no request's path has", name, spec, c)
		}
		for seg := range strings.SplitSeq(strings.Trim(spec, "/"), "/") {
			if seg != "" {
				// "*" is a whole segment; it is no wildcard within one.
				if seg != "*" && strings.Contains(seg, "*") {
					return fmt.Errorf("%s=%s: %q; * stands for one whole segment (/users/*/orders), not part of one", name, spec, seg)
				}
				pt.segments = append(pt.segments, []byte(seg))
			}
		}
		p.patterns = append(p.patterns, pt)
	}
	if len(p.patterns) > Max {
		return fmt.Errorf("%d routes; at most %d", len(p.patterns), Max)
	}
	return nil
}

// MarshalText writes the patterns as they were read.
func (p Patterns) MarshalText() ([]byte, error) { return []byte(p.text), nil }

// String returns the patterns as they were read.
func (p Patterns) String() string { return p.text }

// Classes returns Classes that sort requests by p: new ones, whose
// automatic classes, if any, are their own.
func (p Patterns) Classes() *Classes {
	r := &Classes{patterns: p.patterns}
	names := []string{Other}
	if p.patterns == nil {
		r.auto.Store(map[string]int{})
	}
	for _, pt := range p.patterns {
		names = append(names, pt.name)
	}
	r.names.Store(names)
	return r
}

func validName(s string) bool {
	if s == "" || len(s) > 32 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// Names returns the class names by index, Other first.
func (r *Classes) Names() []string {
	names, _ := r.names.Load().([]string)
	if names == nil {
		return []string{Other}
	}
	return names
}

// Class returns the index of the class of a request, by its method and
// target (the request line's, with any query). It does not allocate.
func (r *Classes) Class(method, target []byte) int {
	path := target
	if i := bytes.IndexAny(path, "?#"); i >= 0 {
		path = path[:i]
	}
	if r.patterns != nil {
		for i := range r.patterns {
			if r.patterns[i].match(method, path) {
				return i + 1
			}
		}
		return 0
	}
	// method + first segment, e.g. "GET /users" for /users/7.
	seg := path
	if len(seg) > 0 && seg[0] == '/' {
		seg = seg[1:]
	}
	if i := bytes.IndexByte(seg, '/'); i >= 0 {
		seg = seg[:i]
	}
	if len(method)+2+len(seg) > maxKey || !printable(method) || !printable(seg) {
		return 0
	}
	var key [maxKey]byte
	k := append(append(append(key[:0], method...), ' ', '/'), seg...)
	auto, _ := r.auto.Load().(map[string]int)
	if i, ok := auto[string(k)]; ok {
		return i
	}
	return r.add(string(k))
}

// printable reports whether b is valid UTF-8 with no control character.
// A class's name is a label, a log field and a line on the status page;
// Prometheus refuses a label that is not UTF-8, and a control character
// garbles the rest. The request line is the client's to write, so a
// method or segment that is neither is "other".
func printable(b []byte) bool {
	for _, c := range b {
		if c < 0x20 || c == 0x7f {
			return false
		}
	}
	return utf8.Valid(b)
}

// maxKey bounds an automatic class's name; a longer method and segment is
// "other", so that classifying never allocates.
const maxKey = 64

// add makes key an automatic class if there is room, or returns 0.
func (r *Classes) add(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	auto, _ := r.auto.Load().(map[string]int)
	if i, ok := auto[key]; ok {
		return i
	}
	if len(auto) >= Max {
		return 0
	}
	next := make(map[string]int, len(auto)+1)
	for k, v := range auto {
		next[k] = v
	}
	names := append(append([]string(nil), r.Names()...), key)
	next[key] = len(names) - 1
	r.names.Store(names)
	r.auto.Store(next)
	return len(names) - 1
}

func (p *pattern) match(method, path []byte) bool {
	if p.method != nil && !bytes.Equal(p.method, method) {
		return false
	}
	rest := path
	for _, seg := range p.segments {
		rest = bytes.TrimPrefix(rest, []byte{'/'})
		if len(rest) == 0 {
			return false
		}
		end := bytes.IndexByte(rest, '/')
		if end < 0 {
			end = len(rest)
		}
		// An empty segment ("//") is no segment: "*" is one that names
		// something, as a literal one does.
		if end == 0 {
			return false
		}
		if !(len(seg) == 1 && seg[0] == '*') && !bytes.Equal(seg, rest[:end]) {
			return false
		}
		rest = rest[end:]
	}
	return true
}
