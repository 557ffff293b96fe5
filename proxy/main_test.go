package proxy

import (
	"os"
	"testing"

	"github.com/loomgate/loomgate/internal/testrun"
)

// TestMain runs the tests that call t.Parallel (those that wait for a
// timeout to run out) more at once than the machine has cores.
func TestMain(m *testing.M) { os.Exit(testrun.Main(m)) }
