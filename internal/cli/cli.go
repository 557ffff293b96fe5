// Package cli is what loomgate's and the lab's commands share in reading
// their command lines: flags parsed with every mistake said in one line,
// and the nearest name suggested for a misspelt one.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// Parse parses args into fs. On -h it prints fs.Usage and returns exit 0;
// on a mistake it prints one line to stderr, "<fs.Name()>: <what is
// wrong> (<fs.Name()> -h)", in place of the flag package's message and
// the whole usage, and returns exit 2. ok is true when the command goes on.
func Parse(fs *flag.FlagSet, args []string, stderr io.Writer) (exit int, ok bool) {
	usage := fs.Usage
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err := fs.Parse(args)
	fs.SetOutput(stderr)
	fs.Usage = usage
	switch {
	case err == nil:
		return 0, true
	case errors.Is(err, flag.ErrHelp):
		if usage != nil {
			usage()
		} else {
			fs.PrintDefaults()
		}
		return 0, false
	}
	fmt.Fprintf(stderr, "%s: %s (%s -h)\n", fs.Name(), Mistake(fs, err), fs.Name())
	return 2, false
}

// Mistake turns an error of fs.Parse into words about the flag.
func Mistake(fs *flag.FlagSet, err error) string {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: "); ok {
		name = strings.TrimLeft(name, "-")
		var names []string
		fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
		if best := Closest(name, names); best != "" {
			return fmt.Sprintf("unknown flag %s; did you mean %s?", Dashed(name), Dashed(best))
		}
		return fmt.Sprintf("unknown flag %s", Dashed(name))
	}
	if name, ok := strings.CutPrefix(msg, "flag needs an argument: "); ok {
		return fmt.Sprintf("%s needs a value", Dashed(strings.TrimLeft(name, "-")))
	}
	// invalid value "4" for flag -window: parse error
	// invalid boolean value "x" for -in-process: parse error
	var value, name string
	if _, rest, ok := strings.Cut(msg, "value "); ok {
		if q, err := strconv.QuotedPrefix(rest); err == nil {
			value, _ = strconv.Unquote(q)
			rest = strings.TrimPrefix(rest[len(q):], " for ")
			rest = strings.TrimPrefix(rest, "flag ")
			name, _, _ = strings.Cut(strings.TrimLeft(rest, "-"), ":")
		}
	}
	f := fs.Lookup(name)
	if f == nil {
		return msg
	}
	want := strings.TrimSpace(msg[strings.LastIndex(msg, ":")+1:])
	if g, ok := f.Value.(flag.Getter); ok {
		switch g.Get().(type) {
		case time.Duration:
			if _, err := strconv.ParseFloat(value, 64); err == nil {
				return fmt.Sprintf("%s %s: a duration needs a unit, as in %ss or %sms", Dashed(name), value, value, value)
			}
			want = "want a duration such as 10s, 500ms or 1m"
		case int, int64, uint, uint64:
			want = "want a whole number"
		case float64:
			want = "want a number"
		case bool:
			want = "want true or false"
		}
	}
	return fmt.Sprintf("%s %q: %s", Dashed(name), value, want)
}

// Dashed writes a flag as the help texts do: -c, --window.
func Dashed(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

// Closest returns the name nearest a misspelt one, within two edits and
// at most half its length (x is no slip for c), or "".
func Closest(name string, names []string) string {
	best, bestDist := "", min(3, len(name)/2+1)
	for _, n := range names {
		if d := editDistance(name, n); d < bestDist {
			best, bestDist = n, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b.
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
