// Package testrun is the TestMain of the packages whose end-to-end tests
// spend their time waiting on the wall clock (load held for seconds, an
// upstream that sleeps, a timeout running out) rather than on a CPU.
package testrun

import (
	"flag"
	"strconv"
	"testing"
)

// Parallel is how many tests that call t.Parallel run at once unless
// -parallel says otherwise. go test's default is one a core: on 2 cores,
// tests that each sleep for seconds would wait in turn for nothing.
const Parallel = 16

// Main parses the flags, raises -parallel to Parallel when it was not
// given, and runs the tests: TestMain's body, as
//
//	func TestMain(m *testing.M) { os.Exit(testrun.Main(m)) }
//
// Tests that measure a rate, a share or memory do not call t.Parallel, and
// run alone before the parallel ones, as go test runs them.
func Main(m *testing.M) int {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		flag.Set("test.parallel", strconv.Itoa(Parallel))
	}
	return m.Run()
}
