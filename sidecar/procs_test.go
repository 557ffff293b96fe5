package sidecar

import (
	"context"
	"io"
	"strings"
	"testing"
)

// A bad GOMAXPROCS stops the sidecar before it listens, with the status
// and the words of a bad LOOMGATE_ variable.
func TestMainRejectsBadGOMAXPROCS(t *testing.T) {
	var stderr strings.Builder
	code := Main(context.Background(), []string{"GOMAXPROCS=zero", "LOOMGATE_LISTEN=127.0.0.1:0", "LOOMGATE_ADMIN_LISTEN=127.0.0.1:0"}, io.Discard, &stderr, "test")
	if code != 2 || !strings.Contains(stderr.String(), `GOMAXPROCS="zero": not a whole number above 0`) {
		t.Errorf("Main with GOMAXPROCS=zero = %d, %q; want 2 and the variable named", code, stderr.String())
	}
	// Beside a bad LOOMGATE_ variable, both in one message.
	stderr.Reset()
	code = Main(context.Background(), []string{"GOMAXPROCS=0", "LOOMGATE_WORKERS=abc"}, io.Discard, &stderr, "test")
	if code != 2 || !strings.Contains(stderr.String(), `LOOMGATE_WORKERS="abc"`) || !strings.Contains(stderr.String(), `GOMAXPROCS="0"`) {
		t.Errorf("Main with GOMAXPROCS=0 and LOOMGATE_WORKERS=abc = %d, %q; want 2 and both named", code, stderr.String())
	}
}

// An empty GOMAXPROCS is set, not unset: it stops the sidecar as an
// empty LOOMGATE_ variable does, where the runtime took its default and
// the start-up log said "Go's default" of a variable someone wrote.
func TestMainRejectsEmptyGOMAXPROCS(t *testing.T) {
	// Ended already: a sidecar that started anyway drains at once.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var stderr strings.Builder
	code := Main(ctx, []string{"GOMAXPROCS=", "LOOMGATE_LISTEN=127.0.0.1:0", "LOOMGATE_ADMIN_LISTEN=127.0.0.1:0"}, io.Discard, &stderr, "test")
	if code != 2 || !strings.Contains(stderr.String(), `GOMAXPROCS="": empty`) {
		t.Errorf("Main with GOMAXPROCS= = %d, %q; want 2 and the variable named", code, stderr.String())
	}
}

func TestLookupEnv(t *testing.T) {
	environ := []string{"GOMAXPROCSX=9", "GOMAXPROCS=2", "GOMAXPROCS=3", "NOEQUALS"}
	if got, set := lookupEnv(environ, "GOMAXPROCS"); got != "2" || !set {
		t.Errorf("lookupEnv(%v, GOMAXPROCS) = %q, %v; want the first, 2", environ, got, set)
	}
	if got, set := lookupEnv(environ, "GOMEMLIMIT"); got != "" || set {
		t.Errorf("lookupEnv(%v, GOMEMLIMIT) = %q, %v; want unset", environ, got, set)
	}
	if got, set := lookupEnv([]string{"GOMAXPROCS="}, "GOMAXPROCS"); got != "" || !set {
		t.Errorf("lookupEnv([GOMAXPROCS=], GOMAXPROCS) = %q, %v; want set and empty", got, set)
	}
}
