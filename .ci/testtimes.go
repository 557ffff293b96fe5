// Command testtimes reads `go test -json` on its standard input and writes
// what `go test` alone would: each package's result line, and the output
// of every test that failed. At the end it lists the slowest tests, so
// that a test that has grown slow is seen in every CI run. It exits 1 if
// any test or package failed, or if the input held no result at all.
//
//	go test -json ./... | go run .ci/testtimes.go [-n 10]
package main

import (
	"bufio"
	"cmp"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"
)

// event is one line of test2json.
type event struct {
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
}

type timing struct {
	name    string
	elapsed float64
}

func main() {
	n := flag.Int("n", 10, "how many of the slowest tests to list")
	flag.Parse()

	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	lines := bufio.NewScanner(os.Stdin)
	lines.Buffer(make([]byte, 1<<20), 64<<20)
	// A test's output is kept until it ends, and written only if it
	// failed; a subtest's is its own.
	kept := map[string]*strings.Builder{}
	var times []timing
	longestSub := map[string]float64{}
	failed, results := false, 0
	for lines.Scan() {
		var e event
		if err := json.Unmarshal(lines.Bytes(), &e); err != nil {
			// The go command's own messages (a build failure) are not
			// JSON.
			fmt.Fprintln(out, lines.Text())
			continue
		}
		key := e.Package + " " + e.Test
		switch e.Action {
		case "build-output":
			// A package that did not build: the compiler's errors.
			fmt.Fprint(out, e.Output)
		case "output":
			if e.Test == "" {
				// The package's lines: "ok  pkg 12.3s", "FAIL", a panic.
				if e.Output != "PASS\n" && !strings.HasPrefix(e.Output, "=== ") {
					fmt.Fprint(out, e.Output)
					out.Flush()
				}
				continue
			}
			b := kept[key]
			if b == nil {
				b = new(strings.Builder)
				kept[key] = b
			}
			b.WriteString(e.Output)
		case "pass", "fail":
			results++
			if e.Action == "fail" {
				failed = true
				if b := kept[key]; b != nil && e.Test != "" {
					fmt.Fprint(out, b.String())
				}
			}
			delete(kept, key)
			// Subtests are counted inside their parents. A parent whose
			// subtests run in parallel reports only its own function's
			// time: it took at least as long as the longest of them.
			top, _, sub := strings.Cut(e.Test, "/")
			switch {
			case e.Test == "":
			case sub:
				name := e.Package + " " + top
				longestSub[name] = max(longestSub[name], e.Elapsed)
			default:
				name := e.Package + " " + top
				times = append(times, timing{strings.TrimPrefix(e.Package, "github.com/loomgate/loomgate/") + " " + e.Test,
					max(e.Elapsed, longestSub[name])})
			}
		case "skip":
			delete(kept, key)
		}
	}
	if err := lines.Err(); err != nil {
		fmt.Fprintln(out, "testtimes:", err)
		failed = true
	}
	slices.SortFunc(times, func(a, b timing) int { return cmp.Compare(b.elapsed, a.elapsed) })
	fmt.Fprintf(out, "\nThe %d slowest tests:\n", min(*n, len(times)))
	for _, t := range times[:min(*n, len(times))] {
		fmt.Fprintf(out, "%10s  %s\n", time.Duration(t.elapsed*float64(time.Second)).Round(100*time.Millisecond), t.name)
	}
	if results == 0 {
		fmt.Fprintln(out, "testtimes: no test results in the input")
		failed = true
	}
	if failed {
		out.Flush()
		os.Exit(1)
	}
}
