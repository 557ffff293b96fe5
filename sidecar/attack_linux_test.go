package sidecar

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/loomgate/loomgate/internal/h2raw"
)

// memoryLimit is the sidecar's memory in these tests: a 256 MiB pod's, as
// the Kubernetes example gives it; GOMEMLIMIT is 90% of it, as the
// sidecar sets it in such a pod (RuntimeLimitShare), and the memory
// bulkhead auto, half of that. The child's peak resident memory must stay
// below it: the kernel would have killed it there.
const memoryLimit = 256 << 20

var memoryLimitEnv = []string{"GOMEMLIMIT=230MiB", "LOOMGATE_MAX_INFLIGHT_BYTES=auto"}

// watchAdmin scrapes the child's /metrics every 500 ms until stop is
// closed, and returns the scrapes that failed or took longer than 3 s.
func watchAdmin(c *child, stop <-chan struct{}) <-chan []error {
	out := make(chan []error, 1)
	go func() {
		var failed []error
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				out <- failed
				return
			case <-t.C:
			}
			if _, err := c.scrape(3 * time.Second); err != nil {
				failed = append(failed, err)
			}
		}
	}()
	return out
}

// TestZeroWindowStreams: 40,000 HTTP/2 streams from 4 clients that grant
// no flow-control window (SETTINGS_INITIAL_WINDOW_SIZE 0, never updated),
// half of them gRPC calls, each for a response of a megabyte, against a
// sidecar process in a 256 MiB memory limit. The sidecar stays up, its
// /metrics answers throughout, its memory stays below the limit, and each
// connection gets a GOAWAY once nothing has moved on it for
// UPSTREAM_TIMEOUT. A connection took 10,000 streams; they pinned the
// process at its limit, the collector at 150-185% of a CPU, /metrics went
// unanswered for 35 s, and the kernel killed it on SIGTERM.
func TestZeroWindowStreams(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a process and holds thousands of streams")
	}
	const conns, streams = 4, 10000
	chunk := make([]byte, 16<<10)
	up := h2cServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", r.Header.Get("Content-Type"))
		for range 64 {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	})
	c := startChild(t, append(memoryLimitEnv, "LOOMGATE_UPSTREAM=http://"+up,
		"LOOMGATE_UPSTREAM_TIMEOUT=3s", "LOOMGATE_DRAIN_TIMEOUT=2s")...)
	stop := make(chan struct{})
	scrapes := watchAdmin(c, stop)

	var wg sync.WaitGroup
	reads := make([]h2raw.Read, conns)
	for i := range conns {
		cl, err := h2raw.Dial(c.traffic, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		wg.Go(func() { reads[i] = cl.ReadAll(30 * time.Second) })
		for s := range streams {
			id := uint32(2*s + 1)
			if s%2 == 0 {
				cl.Request(id, "POST", fmt.Sprintf("/pkg.Service/Watch/%d", s), "content-type", "application/grpc", "te", "trailers")
			} else {
				cl.Get(id, fmt.Sprintf("/plain/%d", s))
			}
			if s%500 == 499 {
				if err := cl.Flush(); err != nil {
					break // the sidecar ended the connection
				}
			}
		}
		cl.Flush()
	}
	wg.Wait()
	close(stop)
	c.alive(t, "after the streams")
	for _, err := range <-scrapes {
		t.Errorf("/metrics during the streams: %v", err)
	}
	// The race detector's bookkeeping inflates the figure many times.
	if peak := c.peakRSS(t); peak >= memoryLimit && !raceEnabled {
		t.Errorf("peak resident memory %d MiB; want below the limit, %d MiB", peak>>20, memoryLimit>>20)
	} else {
		t.Logf("peak resident memory %d MiB (limit %d MiB)", peak>>20, memoryLimit>>20)
	}
	for i, r := range reads {
		if r.GoAway == nil || r.GoAway.ErrCode != http2.ErrCodeEnhanceYourCalm || !r.Ended {
			t.Errorf("connection %d: GOAWAY %v, ended %v; want ENHANCE_YOUR_CALM and the connection ended", i, r.GoAway, r.Ended)
		}
	}
	if _, err := c.scrape(3 * time.Second); err != nil {
		t.Errorf("/metrics after the streams: %v", err)
	}
	if err := c.terminate(t, 30*time.Second); err != nil {
		t.Errorf("after SIGTERM the sidecar exited with %v; want 0", err)
	}
}

// TestConnectionBurst: 19,000 connections at once (within this machine's
// open-file limit of 20,000 for the test's own end of them), half of them
// HTTP/1.1 with a request, half HTTP/2 with no stream, against a sidecar
// process in a 256 MiB memory limit with MAX_CONNS=auto. The sidecar takes
// as many as its memory holds, the rest wait in the listen backlog (or
// time out there); it stays up, /metrics answers throughout, its memory
// stays below the limit, and once the burst ends it serves again. auto
// came from the open-file limit alone, 19,736 connections here: the burst
// took them all, at some 20 KiB each, past the limit (in a pod, the kernel
// killed it, 3 times of 3).
func TestConnectionBurst(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a process and opens 19,000 connections")
	}
	// The test's own end of each connection takes a descriptor too.
	files := openFileLimit()
	if files > 0 && files < 4096 {
		t.Skipf("the open-file limit (%d) leaves too few descriptors for a burst", files)
	}
	burst := 19000
	if files > 0 {
		burst = min(burst, files-1000)
	}
	up := h2cServer(t, func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) })
	c := startChild(t, append(memoryLimitEnv, "LOOMGATE_UPSTREAM=http://"+up,
		"LOOMGATE_MODE=fixed", "LOOMGATE_WORKERS=200", "LOOMGATE_QUEUE_SIZE=10000",
		"LOOMGATE_MAX_CONNS=auto", "LOOMGATE_DRAIN_TIMEOUT=5s")...)
	stop := make(chan struct{})
	scrapes := watchAdmin(c, stop)

	var h2 bytes.Buffer
	h2.WriteString(http2.ClientPreface)
	http2.NewFramer(&h2, nil).WriteSettings()
	h1 := []byte("GET /burst HTTP/1.1\r\nHost: burst.test\r\n\r\n")
	conns := make([]net.Conn, burst)
	var wg sync.WaitGroup
	for i := range conns {
		wg.Go(func() {
			// Eight source addresses, so that the burst does not run
			// short of ephemeral ports beside other tests.
			d := net.Dialer{Timeout: 3 * time.Second, LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+i%8))}}
			nc, err := d.Dial("tcp", c.traffic)
			if err != nil {
				return // beyond the backlog: the client's to retry
			}
			nc.SetWriteDeadline(time.Now().Add(3 * time.Second))
			if i%2 == 0 {
				nc.Write(h1)
			} else {
				nc.Write(h2.Bytes())
			}
			conns[i] = nc
		})
	}
	wg.Wait()
	dialed := 0
	for _, nc := range conns {
		if nc != nil {
			dialed++
		}
	}
	time.Sleep(2 * time.Second) // the sidecar takes what it can
	c.alive(t, "during the burst")
	body, err := c.scrape(3 * time.Second)
	if err != nil {
		t.Fatalf("/metrics during the burst: %v", err)
	}
	open, limit := metricValue(t, body, "loomgate_client_connections"), metricValue(t, body, "loomgate_client_connections_limit")
	peak := c.peakRSS(t)
	t.Logf("%d of %d connections made; the sidecar holds %.0f (its bound %.0f); peak resident memory %d MiB", dialed, burst, open, limit, peak>>20)
	if want := float64(connsMemoryBound(230<<20, 115<<20)); limit != want {
		t.Errorf("loomgate_client_connections_limit = %v; want %v, the memory limit's bound", limit, want)
	}
	if open > limit {
		t.Errorf("loomgate_client_connections = %v; want at most the bound %v", open, limit)
	}
	if peak >= memoryLimit && !raceEnabled {
		t.Errorf("peak resident memory %d MiB; want below the limit, %d MiB", peak>>20, memoryLimit>>20)
	}

	for _, nc := range conns {
		if nc != nil {
			nc.Close()
		}
	}
	client := &http.Client{Timeout: 5 * time.Second}
	deadline := time.Now().Add(30 * time.Second)
	for {
		c.alive(t, "after the burst")
		resp, err := client.Get("http://" + c.traffic + "/after")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no 200 from a new request 30s after the burst ended (last: %v)", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	close(stop)
	for _, err := range <-scrapes {
		t.Errorf("/metrics during the burst: %v", err)
	}
	if err := c.terminate(t, 30*time.Second); err != nil {
		t.Errorf("after SIGTERM the sidecar exited with %v; want 0", err)
	}
}
