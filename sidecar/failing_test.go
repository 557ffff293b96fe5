package sidecar

import (
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestAdviceSizesNothingOnFailures: with the upstream gone, 40 clients
// behind WORKERS=20 get a 502 each in a millisecond. Read as service, that
// is a fast upstream that is not saturated while loomgate's queue holds
// clients back, and the advice said to raise the limit. It says the
// upstream is failing, counts the failures, and sizes nothing.
func TestAdviceSizesNothingOnFailures(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := "http://" + ln.Addr().String()
	ln.Close()
	s := start(t, testConfig(t, "LOOMGATE_UPSTREAM="+gone, "LOOMGATE_MODE=fixed", "LOOMGATE_WORKERS=20"))
	var wg sync.WaitGroup
	stop := make(chan struct{})
	closedLoop(s.URL+"/r", 40, stop, &wg)
	time.Sleep(3 * time.Second)
	close(stop)
	wg.Wait()
	// A snapshot is reused for a second: one taken under the load would
	// not count the last of it.
	time.Sleep(1100 * time.Millisecond)
	doc := adviceDoc(t, s)
	f, r := doc.Figures, doc.Recommendation
	if f.Requests < 100 || f.UpstreamFailed != f.Requests {
		t.Fatalf("figures: %d requests, %d failed at the upstream; want at least 100, every one failed", f.Requests, f.UpstreamFailed)
	}
	if !strings.Contains(r.Summary, "failing") || r.Workers != 0 || r.Bulkhead != 0 || r.Probe != 0 || len(r.Predictions) != 0 {
		t.Errorf("recommendation %q (workers %d, bulkhead %d, probe %d, %d predictions); want the upstream named failing and nothing sized",
			r.Summary, r.Workers, r.Bulkhead, r.Probe, len(r.Predictions))
	}
}
