package sidecar

import (
	"os"
	"testing"

	"github.com/loomgate/loomgate/internal/testrun"
)

// TestMain runs the tests that call t.Parallel more at once than the
// machine has cores: they wait on the wall clock, not on a CPU.
func TestMain(m *testing.M) { os.Exit(testrun.Main(m)) }

// realTimeVariable, set to 1, runs the tests whose subject is behaviour
// over real time under load: a probe finding a service at its peak,
// priorities through a flood, fair queuing, a dry run beside a full pool,
// a dry run's would-be adaptive limit.
// Each holds load for tens of seconds to a couple of minutes, and what it
// measures (rates, shares, percentiles) needs the machine to itself, so
// they are out of the default run; CI runs them in a step of their own,
// without the race detector and one at a time (see .ci/run).
const realTimeVariable = "LOAD_TESTS"

// realTime skips t unless realTimeVariable is 1; about says how long it
// holds load.
func realTime(t *testing.T, about string) {
	t.Helper()
	if os.Getenv(realTimeVariable) != "1" {
		t.Skipf("measures behaviour over real time under load (%s): runs with %s=1, as CI's step for them does", about, realTimeVariable)
	}
}
