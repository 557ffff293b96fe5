package sidecar

import (
	"context"
	"io"
	"strings"
	"testing"
)

func TestReadProcs(t *testing.T) {
	for _, tt := range []struct {
		env  string
		n    int
		want Procs
	}{
		// Unset: whatever the runtime chose, from the CPUs and the limit.
		{"", 2, Procs{N: 2, Source: "Go's default"}},
		{"", 32, Procs{N: 32, Source: "Go's default"}},
		// Set: the runtime applied it; the variable is the source.
		{"1", 1, Procs{N: 1, Source: "GOMAXPROCS"}},
		{"4", 4, Procs{N: 4, Source: "GOMAXPROCS"}},
		{"+3", 3, Procs{N: 3, Source: "GOMAXPROCS"}},
	} {
		got, err := ReadProcs(tt.env, tt.n)
		if err != nil || got != tt.want {
			t.Errorf("ReadProcs(%q, %d) = %+v, %v; want %+v", tt.env, tt.n, got, err, tt.want)
		}
	}
	// Each of these the runtime ignores for its default.
	for _, env := range []string{"0", "-1", "two", "2.5", " 2", "2 ", "4294967296"} {
		if _, err := ReadProcs(env, 2); err == nil || !strings.Contains(err.Error(), "GOMAXPROCS=") {
			t.Errorf("ReadProcs(%q, 2) = %v; want an error naming GOMAXPROCS", env, err)
		}
	}
}

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

func TestEnvValue(t *testing.T) {
	environ := []string{"GOMAXPROCSX=9", "GOMAXPROCS=2", "GOMAXPROCS=3", "NOEQUALS"}
	if got := envValue(environ, "GOMAXPROCS"); got != "2" {
		t.Errorf("envValue(%v, GOMAXPROCS) = %q; want the first, 2", environ, got)
	}
	if got := envValue(environ, "GOMEMLIMIT"); got != "" {
		t.Errorf("envValue(%v, GOMEMLIMIT) = %q; want empty", environ, got)
	}
}
