package sidecar

import (
	"fmt"
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
