package sidecar

import (
	"io"
	"net/http"
	"sync"
	"testing"
	"time"
)

// TestDryRunCountsWhatTheModeWouldDo: the same burst of 40 requests at
// once, against fixed mode with 4 workers and a queue of 4, for real and
// in a dry run. For real, 32 are rejected at once; in the dry run none
// is, every request reaches the upstream, and the dry run's counters say
// the same 32 would have been.
func TestDryRunCountsWhatTheModeWouldDo(t *testing.T) {
	up := upstream(t, time.Second)
	burst := func(s *running) (statuses map[int]int) {
		statuses = map[int]int{}
		var mu sync.Mutex
		var wg sync.WaitGroup
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 40}}
		for range 40 {
			wg.Go(func() {
				resp, err := client.Get(s.URL + "/burst")
				if err != nil {
					t.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				mu.Lock()
				statuses[resp.StatusCode]++
				mu.Unlock()
			})
		}
		wg.Wait()
		return statuses
	}
	env := []string{"LOOMGATE_UPSTREAM=" + up, "LOOMGATE_MODE=fixed", "LOOMGATE_WORKERS=4", "LOOMGATE_QUEUE_SIZE=4", "LOOMGATE_QUEUE_TIMEOUT=10s"}

	real := start(t, testConfig(t, env...))
	got := burst(real)
	realRejected := int(gathered(t, real.Sidecar, "loomgate_requests_total", "rejected_queue_full"))
	if got[200] != 8 || got[503] != 32 || realRejected != 32 {
		t.Fatalf("for real: statuses %v, rejected_queue_full %d; want 8 served and 32 rejected", got, realRejected)
	}

	dry := start(t, testConfig(t, append(env, "LOOMGATE_DRY_RUN=true")...))
	got = burst(dry)
	if got[200] != 40 {
		t.Errorf("dry run: statuses %v; want all 40 served", got)
	}
	// The queued ones' decisions come when the shadow admits them, a
	// service time after the burst.
	deadline := time.Now().Add(10 * time.Second)
	for {
		would := map[string]int{}
		for _, w := range []string{"admitted", "queued", "rejected_queue_full", "rejected_queue_timeout"} {
			would[w] = int(gathered(t, dry.Sidecar, "loomgate_dry_run_requests_total", w))
		}
		if would["admitted"]+would["queued"] == 8 && would["rejected_queue_full"] == realRejected {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("dry run counted %v; want 8 admitted or queued and %d rejected_queue_full, as for real", would, realRejected)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := gathered(t, dry.Sidecar, "loomgate_requests_total", "rejected_queue_full"); n != 0 {
		t.Errorf("dry run rejected %v requests for real; want none", n)
	}
	if l := gathered(t, dry.Sidecar, "loomgate_limit", ""); l != 4 {
		t.Errorf("dry run's loomgate_limit = %v; want the policy's, 4", l)
	}
}
