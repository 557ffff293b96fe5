package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/loomgate/loomgate/sidecar"
	"github.com/loomgate/loomgate/sidecar/sidecartest"
)

// loomgateBin is this command, built once per test run, for tests of what
// only a real process shows: exit codes, signals, stderr.
var loomgateBin = &sidecartest.Binary{Name: "loomgate"}

func TestMain(m *testing.M) {
	code := m.Run()
	loomgateBin.Remove()
	os.Exit(code)
}

func loomgateBinary(t testing.TB) string { return loomgateBin.Path(t) }

// TestBadVariableExits2 runs the built binary with each kind of bad input
// and checks it refuses to start, naming the variable.
func TestBadVariableExits2(t *testing.T) {
	bin := loomgateBinary(t)
	tests := []struct {
		env  []string
		name string // the variable stderr must name
	}{
		{[]string{"LOOMGATE_MODE=turbo"}, "LOOMGATE_MODE"},
		{[]string{"LOOMGATE_MODE=fixed", "LOOMGATE_WORKERS=0"}, "LOOMGATE_WORKERS"},
		{[]string{"LOOMGATE_MODE=fixed", "LOOMGATE_WORKERS=-3"}, "LOOMGATE_WORKERS"},
		{[]string{"LOOMGATE_MODE=fixed", "LOOMGATE_QUEUE_SIZE=-1"}, "LOOMGATE_QUEUE_SIZE"},
		{[]string{"LOOMGATE_BULKHEAD=-5"}, "LOOMGATE_BULKHEAD"},
		{[]string{"LOOMGATE_MAX_INFLIGHT_BYTES=-1"}, "LOOMGATE_MAX_INFLIGHT_BYTES"},
		{[]string{"LOOMGATE_MAX_BODY_BYTES=12 parsecs"}, "LOOMGATE_MAX_BODY_BYTES"},
		{[]string{"LOOMGATE_MODE=fixed", "LOOMGATE_QUEUE_TIMEOUT=100"}, "LOOMGATE_QUEUE_TIMEOUT"},
		{[]string{"LOOMGATE_UPSTREAM_TIMEOUT=5"}, "LOOMGATE_UPSTREAM_TIMEOUT"},
		{[]string{"LOOMGATE_UPSTREAM=https://service:8443"}, "LOOMGATE_UPSTREAM"},
		{[]string{"LOOMGATE_UPSTREAM=127.0.0.1:8081"}, "LOOMGATE_UPSTREAM"},
		{[]string{"LOOMGATE_UPSTREAM=http://service:8081/api"}, "LOOMGATE_UPSTREAM"},
		// The other mode's settings are checked as strictly as the active one's.
		{[]string{"LOOMGATE_MODE=fixed", "LOOMGATE_BULKHEAD=-10"}, "LOOMGATE_BULKHEAD"},
		{[]string{"LOOMGATE_WORKERS=0"}, "LOOMGATE_WORKERS"},
		{[]string{"LOOMGATE_BULKHEAD_WAIT=1s"}, "LOOMGATE_BULKHEAD_WAIT"},
		{[]string{"LOOMGATE_ACCESS_LOG=yaml"}, "LOOMGATE_ACCESS_LOG"},
		{[]string{"LOOMGATE_SERVER_TIMING=perhaps"}, "LOOMGATE_SERVER_TIMING"},
		{[]string{"LOOMGATE_LISTEN=127.0.0.1:9090", "LOOMGATE_ADMIN_LISTEN=127.0.0.1:9090"}, "LOOMGATE_ADMIN_LISTEN"},
		{[]string{"LOOMGATE_WORKRS=10"}, "LOOMGATE_WORKRS"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.env, " "), func(t *testing.T) {
			// A bound on the run: a case the parser wrongly accepts would
			// otherwise serve until the test binary's own timeout.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin)
			// Listeners that would work, so that only the bad variable fails.
			cmd.Env = append([]string{"LOOMGATE_LISTEN=127.0.0.1:0", "LOOMGATE_ADMIN_LISTEN=127.0.0.1:0"}, tt.env...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 2 {
				t.Fatalf("exit = %v; want status 2", err)
			}
			if !strings.Contains(stderr.String(), tt.name+"=") {
				t.Errorf("stderr = %q; want it to name %s", stderr.String(), tt.name)
			}
		})
	}
}

func TestAllProblemsAtOnce(t *testing.T) {
	cmd := exec.Command(loomgateBinary(t))
	cmd.Env = []string{"LOOMGATE_MODE=fixed", "LOOMGATE_WORKERS=none", "LOOMGATE_QUEUE_TIMEOUT=5", "LOOMGATE_UPSTREAM=ftp://x"}
	out, _ := cmd.CombinedOutput()
	for _, name := range []string{"LOOMGATE_WORKERS", "LOOMGATE_QUEUE_TIMEOUT", "LOOMGATE_UPSTREAM"} {
		if !strings.Contains(string(out), name+"=") {
			t.Errorf("output lacks %s:\n%s", name, out)
		}
	}
}

func TestHelpListsEveryVariable(t *testing.T) {
	out, err := exec.Command(loomgateBinary(t), "-h").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range sidecar.Variables() {
		if !strings.Contains(string(out), v.Name+" (default ") {
			t.Errorf("-h does not list %s with its default", v.Name)
		}
	}
}

// freePorts returns two distinct loopback addresses nothing listens on,
// for traffic and admin. Both listeners stay open until both are found:
// the kernel may hand a port it just released to the next listen, and a
// sidecar told to use one port twice refuses to start.
func freePorts(t testing.TB) (string, string) {
	t.Helper()
	var addrs [2]string
	for i := range addrs {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		addrs[i] = ln.Addr().String()
	}
	return addrs[0], addrs[1]
}

// TestDrainOnSIGTERM sends SIGTERM while requests are both in flight and
// queued: readiness fails, and every one of them still gets its 200.
func TestDrainOnSIGTERM(t *testing.T) { drainOnSignal(t, syscall.SIGTERM) }

// TestDrainOnSIGHUP: the hang-up of the terminal a sidecar was started
// from (or a supervisor's SIGHUP) drains it as SIGTERM does; by Go's
// default it ended the process at once, cutting what was in flight.
func TestDrainOnSIGHUP(t *testing.T) { drainOnSignal(t, syscall.SIGHUP) }

func drainOnSignal(t *testing.T, sig syscall.Signal) {
	upURL, _ := slowUpstream(t, 400*time.Millisecond)
	traffic, admin := freePorts(t)
	cmd := exec.Command(loomgateBinary(t))
	cmd.Env = []string{
		"LOOMGATE_LISTEN=" + traffic, "LOOMGATE_ADMIN_LISTEN=" + admin, "LOOMGATE_UPSTREAM=" + upURL,
		"LOOMGATE_MODE=fixed", "LOOMGATE_WORKERS=2", "LOOMGATE_DRAIN_TIMEOUT=20s",
	}
	stderr := &sidecartest.SyncBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	waitUntil(t, func() bool {
		resp, err := http.Get("http://" + admin + "/readyz")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == 200
	})

	// 6 requests on 2 workers: 2 in flight, 4 queued, about 1.2 s of work.
	const n = 6
	results := make(chan error, n)
	for range n {
		go func() {
			c, err := net.Dial("tcp", traffic)
			if err != nil {
				results <- err
				return
			}
			defer c.Close()
			io.WriteString(c, "GET /drain HTTP/1.1\r\nHost: x\r\n\r\n")
			c.SetReadDeadline(time.Now().Add(20 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err == nil && resp.StatusCode != 200 {
				err = fmt.Errorf("status %d", resp.StatusCode)
			}
			results <- err
		}()
	}
	waitUntil(t, func() bool { return strings.Count(metricsText(t, admin), "\nloomgate_queued 4") == 1 })

	if err := cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool {
		resp, err := http.Get("http://" + admin + "/readyz")
		if err != nil {
			return true // already past the drain
		}
		resp.Body.Close()
		return resp.StatusCode == 503
	})
	for range n {
		if err := <-results; err != nil {
			t.Errorf("request admitted or queued before %v: %v; want 200", sig, err)
		}
	}
	waitErr := make(chan error, 1)
	go func() { waitErr <- cmd.Wait() }()
	select {
	case err := <-waitErr:
		if err != nil {
			t.Errorf("exit = %v; want 0 after draining\n%s", err, stderr)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("still running 15s after %v\n%s", sig, stderr)
	}
	if _, err := net.DialTimeout("tcp", traffic, time.Second); err == nil {
		t.Error("traffic listener still accepts after exit")
	}
	if !strings.Contains(stderr.String(), "drained") {
		t.Errorf("log lacks the drain:\n%s", stderr)
	}
	// The start-up log says where the status page is.
	if want := "status_page=http://" + admin + "/"; !strings.Contains(stderr.String(), want) {
		t.Errorf("log lacks %s:\n%s", want, stderr)
	}
}

func metricsText(t testing.TB, admin string) string {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// TestHalfSentRequestDoesNotHoldTheDrain: a client that sent half of its
// headers and stopped is cut at the header timeout, so a SIGTERM drains in
// that time and exits 0, not at the drain timeout with 1.
func TestHalfSentRequestDoesNotHoldTheDrain(t *testing.T) {
	upURL, _ := slowUpstream(t, 0)
	traffic, admin := freePorts(t)
	cmd := exec.Command(loomgateBinary(t))
	cmd.Env = []string{
		"LOOMGATE_LISTEN=" + traffic, "LOOMGATE_ADMIN_LISTEN=" + admin, "LOOMGATE_UPSTREAM=" + upURL,
		"LOOMGATE_HEADER_TIMEOUT=1s", "LOOMGATE_DRAIN_TIMEOUT=20s",
	}
	stderr := &sidecartest.SyncBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	waitUntil(t, func() bool {
		resp, err := http.Get("http://" + admin + "/readyz")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == 200
	})
	c, err := net.Dial("tcp", traffic)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET /half HTTP/1.1\r\nHost: x\r\nX-Half")
	time.Sleep(100 * time.Millisecond)
	start := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitErr := make(chan error, 1)
	go func() { waitErr <- cmd.Wait() }()
	select {
	case err := <-waitErr:
		if err != nil {
			t.Errorf("exit = %v; want 0\n%s", err, stderr)
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("drain took %v; want about the 1s header timeout", took)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("still running 15s after SIGTERM with a half-sent request\n%s", stderr)
	}
}

// TestCommandLineMistakes: what a newcomer types first gets a message that
// says what to do instead, not a page of help.
func TestCommandLineMistakes(t *testing.T) {
	bin := loomgateBinary(t)
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--workers", "5"}, "--workers is not a flag; the sidecar is configured by LOOMGATE_* variables: LOOMGATE_WORKERS=5 loomgate"},
		{[]string{"--mode=fixed"}, "LOOMGATE_MODE=fixed loomgate"},
		{[]string{"--colour"}, "--colour is not a flag; the sidecar is configured by LOOMGATE_* variables (loomgate -h lists them)"},
		{[]string{"demoo"}, `unknown command "demoo" (did you mean demo?)`},
		{[]string{"serve"}, `unknown command "serve"; the commands are proxy, advise, version, demo, bench, stub`},
		{[]string{"advise", "--admn", "http://127.0.0.1:9090"}, "loomgate advise: unknown flag --admn; did you mean --admin? (loomgate advise -h)"},
		{[]string{"advise", "--format"}, "loomgate advise: --format needs a value (loomgate advise -h)"},
	} {
		cmd := exec.Command(bin, tt.args...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 {
			t.Errorf("loomgate %q: %v; want exit status 2", tt.args, err)
		}
		if !strings.Contains(stderr.String(), tt.want) {
			t.Errorf("loomgate %q said %q; want it to contain %q", tt.args, stderr.String(), tt.want)
		}
		if n := strings.Count(stderr.String(), "\n"); n > 2 {
			t.Errorf("loomgate %q printed %d lines; want the one that says what to do", tt.args, n)
		}
	}
}

// TestLabCommandsOutsideACheckout: the binary carries the sidecar only;
// away from a checkout, demo says how to get the lab.
func TestLabCommandsOutsideACheckout(t *testing.T) {
	cmd := exec.Command(loomgateBinary(t), "demo")
	cmd.Dir = t.TempDir()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 {
		t.Errorf("loomgate demo outside a checkout: %v; want exit status 2", err)
	}
	for _, want := range []string{"carries the sidecar only", "go run ./cmd/loomgate demo", "go build ./cmd/loomlab && ./loomlab demo"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("loomgate demo outside a checkout said %q; want %q", stderr.String(), want)
		}
	}
}

// TestLabCommandsFromACheckout: in the checkout, loomgate stub runs the
// lab's stub, arguments and exit status passed through.
func TestLabCommandsFromACheckout(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the lab")
	}
	cmd := exec.Command(loomgateBinary(t), "stub", "--bogus")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 {
		t.Errorf("loomgate stub --bogus: %v; want the lab's exit status 2\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "bogus") {
		t.Errorf("loomgate stub --bogus said %q; want the lab's stub to name the flag", stderr.String())
	}
}

// TestLabCommandSaysItIsBuilding: from a checkout, a lab command's first
// line says the lab is being built, before the build starts: the first
// build is silent for a minute or more, and the demo said nothing until
// it ended. A go command that takes two seconds to fail stands in for the
// build: the line arrives within a second, while it runs, and its failure
// is reported after it.
func TestLabCommandSaysItIsBuilding(t *testing.T) {
	fake := t.TempDir()
	script := "#!/bin/sh\nsleep 2\necho 'go: this build fails on purpose' >&2\nexit 1\n"
	if err := os.WriteFile(fake+"/go", []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(loomgateBinary(t), "demo")
	cmd.Env = append(os.Environ(), "PATH="+fake+":/usr/bin:/bin")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(stderr)
	var said []string
	var first time.Duration
	for lines.Scan() {
		if said = append(said, lines.Text()); len(said) == 1 {
			first = time.Since(began)
		}
	}
	err = cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Errorf("loomgate demo with a failing build: %v; want exit status 1", err)
	}
	if len(said) < 3 {
		t.Fatalf("loomgate demo said %q; want the building line, the build's failure and what failed", said)
	}
	if want := "loomgate demo: " + buildingLab; said[0] != want {
		t.Errorf("first line %q; want %q", said[0], want)
	}
	if first > time.Second {
		t.Errorf("the first line came %v after the start; want it within a second, before the build", first.Round(time.Millisecond))
	}
	if said[1] != "go: this build fails on purpose" || !strings.HasPrefix(said[2], "loomgate demo: building the lab (./cmd/loomlab in ") {
		t.Errorf("after the first line: %q; want the build's own words, then loomgate's", said[1:])
	}
}
