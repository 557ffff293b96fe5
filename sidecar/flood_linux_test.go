package sidecar

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// floodFiles is the open-file limit of the sidecar under a flood.
const floodFiles = 256

// TestConnectionFlood: three times the open-file limit in connections,
// some with requests held at the upstream, must leave the sidecar running,
// its admin port answering while it is bounded, and serving new requests
// once the flood ends; then SIGTERM still drains and exits cleanly.
// Unbounded (LOOMGATE_MAX_CONNS=0), accepting fails for want of
// descriptors: it is counted and retried, never the end of the process.
func TestConnectionFlood(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a process and opens hundreds of connections")
	}
	for _, tc := range []struct {
		name, maxConns string
		// bounded: the admin port answers during the flood, and the
		// client connections stay within the bound.
		bounded bool
		// mode is LOOMGATE_MODE; every says which connections send a
		// request the upstream holds: every one in every.
		mode  string
		every int
	}{
		{"auto bound", "auto", true, "fixed", 4},
		{"unbounded", "0", false, "fixed", 4},
		// Every request admitted at once and held, each on an upstream
		// connection of its own: the descriptors run out on the way to
		// the upstream as well as on accepting.
		{"unbounded, every request at the upstream", "0", false, "unbounded", 1},
	} {
		t.Run(tc.name, func(t *testing.T) { flood(t, tc.maxConns, tc.bounded, tc.mode, tc.every) })
	}
}

func flood(t *testing.T, maxConns string, bounded bool, mode string, every int) {
	release := make(chan struct{})
	var once sync.Once
	releaseAll := func() { once.Do(func() { close(release) }) }
	upLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	up := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/held" {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		io.WriteString(w, "ok")
	})}
	go up.Serve(upLn)
	t.Cleanup(func() { releaseAll(); up.Close() })

	c := startChild(t, fmt.Sprintf("LOOMGATE_TEST_CHILD_FILES=%d", floodFiles),
		"LOOMGATE_UPSTREAM=http://"+upLn.Addr().String(),
		"LOOMGATE_MODE="+mode, "LOOMGATE_WORKERS=20", "LOOMGATE_QUEUE_SIZE=10000",
		"LOOMGATE_MAX_CONNS="+maxConns, "LOOMGATE_DRAIN_TIMEOUT=10s",
		"LOOMGATE_MAX_INFLIGHT_BYTES=0",
	)
	traffic, admin := c.traffic, c.admin
	alive := func(when string) {
		t.Helper()
		c.alive(t, when)
	}
	client := &http.Client{Timeout: 5 * time.Second}

	// The flood: 3× the open-file limit in connections; one in four sends
	// a request that the upstream holds, the rest stay idle.
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := range 3 * floodFiles {
		c, err := net.DialTimeout("tcp", traffic, 5*time.Second)
		if err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
		conns = append(conns, c)
		if i%every == 0 {
			fmt.Fprintf(c, "GET /held HTTP/1.1\r\nHost: flood\r\n\r\n")
		}
	}
	// Give the sidecar time to take all it can and run out.
	time.Sleep(2 * time.Second)
	alive("during the flood")
	if bounded {
		resp, err := client.Get("http://" + admin + "/metrics")
		if err != nil {
			t.Fatalf("admin port during the flood: %v", err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		open, limit := metricValue(t, body, "loomgate_client_connections"), metricValue(t, body, "loomgate_client_connections_limit")
		if limit <= 0 || limit >= floodFiles {
			t.Errorf("loomgate_client_connections_limit = %v; want a bound below the open-file limit %d", limit, floodFiles)
		}
		if open > limit {
			t.Errorf("loomgate_client_connections = %v; want at most the limit %v", open, limit)
		}
	}

	// The flood ends.
	releaseAll()
	for _, c := range conns {
		c.Close()
	}
	conns = nil
	deadline := time.Now().Add(20 * time.Second)
	for {
		alive("after the flood")
		resp, err := client.Get("http://" + traffic + "/after")
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no 200 from a new request 20s after the flood ended (last: %v)", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	resp, err := client.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatalf("admin port after the flood: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !bounded {
		if n := metricValue(t, body, "loomgate_accept_errors_total"); n < 1 {
			t.Errorf("loomgate_accept_errors_total = %v; want the failed accepts counted", n)
		}
	}
	// The upstream answered everything it was asked: a dial that failed
	// for want of the sidecar's own descriptors is not its failure.
	if n := metricValue(t, body, `loomgate_requests_total{outcome="upstream_error"}`); n != 0 {
		t.Errorf("upstream_error = %v; want 0, the upstream never failed", n)
	}
	if mode == "unbounded" && every == 1 {
		if n := metricValue(t, body, `loomgate_requests_total{outcome="internal_error"}`); n < 1 {
			t.Errorf("internal_error = %v; want the dials that found no descriptor counted as the sidecar's", n)
		}
	}
	if err := c.terminate(t, 30*time.Second); err != nil {
		t.Errorf("after SIGTERM the sidecar exited with %v; want 0", err)
	}
}

// metricValue reads an unlabelled sample from a text exposition.
func metricValue(t *testing.T, body []byte, name string) float64 {
	t.Helper()
	for _, line := range strings.Split(string(body), "\n") {
		var v float64
		if strings.HasPrefix(line, name+" ") {
			if _, err := fmt.Sscanf(line[len(name)+1:], "%g", &v); err == nil {
				return v
			}
		}
	}
	t.Fatalf("no sample of %s in /metrics", name)
	return 0
}
