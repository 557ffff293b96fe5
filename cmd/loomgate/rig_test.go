package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/loomgate/loomgate/bench"
	"github.com/loomgate/loomgate/stub"
)

func envOf(vars map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
}

func TestStubCommandRefusesBadInput(t *testing.T) {
	tests := []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--pool", "-1"}, nil, "--pool -1: want 0 (no hidden pool) or more workers"},
		{[]string{"--db-pool", "0"}, nil, "--db-pool 0: want at least 1 connection"},
		{[]string{"--pool", "many"}, nil, `invalid value "many" for flag -pool`},
		{[]string{"--nope"}, nil, "flag provided but not defined: -nope"},
		{[]string{"extra"}, nil, `unexpected argument "extra"`},
		{nil, map[string]string{"STUB_POOL": "lots"}, `STUB_POOL="lots": want a whole number, as --pool takes`},
		{nil, map[string]string{"STUB_DB_POOL": "-3"}, "--db-pool -3: want at least 1 connection"},
	}
	for _, tt := range tests {
		var stderr bytes.Buffer
		code := stubCommand(context.Background(), tt.args, envOf(tt.env), io.Discard, &stderr)
		if code != 2 || !strings.Contains(stderr.String(), tt.want) {
			t.Errorf("stub %v with %v = %d, %q; want 2 and %q", tt.args, tt.env, code, stderr.String(), tt.want)
		}
	}
}

func TestStubCommandServes(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr syncBuffer
	done := make(chan int, 1)
	// The variables set the defaults; the flag overrides STUB_DB_POOL.
	env := envOf(map[string]string{"STUB_LISTEN": "127.0.0.1:0", "STUB_POOL": "3", "STUB_DB_POOL": "99"})
	go func() { done <- stubCommand(ctx, []string{"--db-pool", "7"}, env, io.Discard, &stderr) }()

	addrRE := regexp.MustCompile(`listening on (127\.0\.0\.1:\d+) \(db pool 7, hidden pool of 3\)`)
	var addr string
	for deadline := time.Now().Add(10 * time.Second); addr == "" && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if m := addrRE.FindStringSubmatch(stderr.String()); m != nil {
			addr = m[1]
		}
	}
	if addr == "" {
		t.Fatalf("stub did not say where it listens:\n%s", stderr.String())
	}
	for path, want := range map[string]string{
		"/wait?ms=1": "waited 1 ms",
		"/metrics":   "loomgate_stub_pool_size 3",
	} {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(body), want) {
			t.Errorf("GET %s = %d, body without %q", path, resp.StatusCode, want)
		}
	}
	if !strings.Contains(stderr.String(), "db pool 7") {
		t.Errorf("--db-pool 7 did not override STUB_DB_POOL=99:\n%s", stderr.String())
	}

	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("stub after its context ended = %d; want 0\n%s", code, stderr.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("stub did not stop after its context ended")
	}
}

func TestBenchCommandRefusesBadInput(t *testing.T) {
	tests := []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "give --url URL (your service, or its sidecar) or --scenario NAME (crossover, fairfight, pool, cpu, memory, hidden)"},
		{[]string{"--url", "http://127.0.0.1:1/", "-c", "10,x"}, 2, `-c "10,x": "x" is not a level`},
		{[]string{"--url", "http://127.0.0.1:1/", "-c", "0"}, 2, `"0" is not a level`},
		{[]string{"--url", "127.0.0.1:8080"}, 2, `--url "127.0.0.1:8080": want an http:// or https:// URL`},
		{[]string{"--url", "http://127.0.0.1:1/", "--admin", "9090"}, 2, `--admin "9090": want an http://`},
		{[]string{"--url", "http://127.0.0.1:1/", "--window", "-1s"}, 2, "--window -1s: want a duration that is not negative"},
		{[]string{"--url", "http://127.0.0.1:1/", "--scenario", "pool"}, 2, "--url and --scenario are exclusive"},
		{[]string{"--scenario", "pool", "--admin", "http://127.0.0.1:9090"}, 2, "--admin goes with --url"},
		{[]string{"--scenario", "nope"}, 2, `--scenario "nope": want one of crossover, fairfight, pool, cpu, memory, hidden, or list`},
		{[]string{"--scenario", "crossover"}, 1, "--scenario crossover needs the in-process launcher"},
		{[]string{"--timeout", "soon"}, 2, `invalid value "soon" for flag -timeout`},
		{[]string{"--url", "http://127.0.0.1:1/", "stray"}, 2, `unexpected argument "stray"`},
	}
	for _, tt := range tests {
		var stderr bytes.Buffer
		code := benchCommand(context.Background(), tt.args, nil, io.Discard, &stderr)
		if code != tt.code || !strings.Contains(stderr.String(), tt.want) {
			t.Errorf("bench %v = %d, %q; want %d and %q", tt.args, code, stderr.String(), tt.code, tt.want)
		}
	}
}

func TestBenchCommandUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	var stderr bytes.Buffer
	code := benchCommand(context.Background(), []string{"--url", "http://" + addr + "/", "-c", "1"}, nil, io.Discard, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), "target unreachable") {
		t.Errorf("bench against a closed port = %d, %q; want 1 and the reason", code, stderr.String())
	}
}

func TestBenchCommandListsScenarios(t *testing.T) {
	var stdout bytes.Buffer
	if code := benchCommand(context.Background(), []string{"--scenario", "list"}, nil, &stdout, io.Discard); code != 0 {
		t.Fatalf("bench --scenario list = %d; want 0", code)
	}
	for _, name := range bench.ScenarioNames() {
		if !strings.Contains(stdout.String(), name+" ") {
			t.Errorf("scenario list lacks %s:\n%s", name, stdout.String())
		}
	}
	if !strings.Contains(stdout.String(), "path /wait?ms=200, levels 50,100,200,500,1000,2000, arms: fixed 200; unbounded") {
		t.Errorf("scenario list does not describe crossover:\n%s", stdout.String())
	}
}

func TestBenchCommandAgainstURL(t *testing.T) {
	base := startStub(t, stub.Config{})
	out := filepath.Join(t.TempDir(), "results")
	var stdout, stderr bytes.Buffer
	code := benchCommand(context.Background(), []string{
		"--url", base + "/wait?ms=20", "--admin", base, "-c", "1,4",
		"--warmup", "100ms", "--window", "500ms", "--out", out,
	}, nil, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("bench = %d\nstderr:\n%s", code, stderr.String())
	}
	for _, want := range []string{"| arm | c | rps |", "/wait?ms=20 | 1 |", "/wait?ms=20 | 4 |", "| memory | physics |", "- Physics check:"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout.String())
		}
	}
	for _, want := range []string{"[1/2] c1: 1 users on", "[2/2] c4: ", "wrote " + filepath.Join(out, "results.csv")} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
		}
	}
	for _, name := range []string{"results.csv", "results.json", "report.html"} {
		if fi, err := os.Stat(filepath.Join(out, name)); err != nil || fi.Size() == 0 {
			t.Errorf("--out: %s: %v", name, err)
		}
	}
}

func TestBenchCommandScenario(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := benchCommand(context.Background(), []string{
		"--scenario", "hidden", "-c", "2", "--warmup", "100ms", "--window", "400ms",
	}, inProcess{}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("bench --scenario hidden = %d\nstderr:\n%s", code, stderr.String())
	}
	for _, want := range []string{"| unbounded, stub pool 50 | 2 |", "| unbounded, no stub pool | 2 |"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout.String())
		}
	}
	if !strings.Contains(stderr.String(), "[2/2] hidden unbounded, no stub pool c2: ") {
		t.Errorf("stderr lacks the scenario's progress:\n%s", stderr.String())
	}
}

func TestParseLevels(t *testing.T) {
	got, err := parseLevels(" 50, 100,2000")
	if err != nil || len(got) != 3 || got[0] != 50 || got[1] != 100 || got[2] != 2000 {
		t.Errorf("parseLevels(\" 50, 100,2000\") = %v, %v; want [50 100 2000]", got, err)
	}
	for _, bad := range []string{"", "1,,2", "-5", "1.5", "ten"} {
		if _, err := parseLevels(bad); err == nil {
			t.Errorf("parseLevels(%q) = nil error; want one", bad)
		}
	}
}
