package proxy

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loomgate/loomgate/limiter"
)

// TestThousandsOfQueuedClientsLeaveTogether is the end of a load test, or
// a client fleet timing out at once: thousands of requests queued behind a
// few busy workers, being admitted as all their clients close together. Repeated, because the failure it guards against
// (a wait's context reused for the next request while the context package
// still watched it) crashed the process on a fraction of such moments.
// Every request must end exactly once, the limiter must end empty, and the
// upstream must never see more than the workers.
func TestThousandsOfQueuedClientsLeaveTogether(t *testing.T) {
	const (
		workers = 8
		clients = 1500
		rounds  = 4
	)
	// Each round holds the workers until every client has queued, then
	// lets them go as the clients leave: admissions, timeouts and
	// departures all at once, however fast the machine dials.
	var gate atomic.Pointer[chan struct{}]
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		<-*gate.Load()
		time.Sleep(2 * time.Millisecond)
		io.WriteString(w, "ok")
	})
	tp := startProxy(t, up.URL, limiter.Config{
		Mode: limiter.Fixed, Workers: workers, QueueSize: clients,
		QueueTimeout: time.Minute,
	}, func(c *Config) { c.Logger = discardLogger() })

	sent := 0
	for round := range rounds {
		open := make(chan struct{})
		gate.Store(&open)
		conns := make([]net.Conn, 0, clients)
		for range clients {
			c, err := net.Dial("tcp", tp.addr)
			if err != nil {
				t.Fatalf("round %d: dial: %v", round, err)
			}
			if _, err := io.WriteString(c, get("/leave")); err != nil {
				t.Fatalf("round %d: write: %v", round, err)
			}
			conns = append(conns, c)
		}
		sent += clients
		waitFor(t, func() bool { return tp.limiter.Stats().Queued == clients-workers })
		// Leave while the queue is long and moving.
		close(open)
		for _, c := range conns {
			c.Close()
		}
		tp.rec.wait(t, sent)
		tp.waitIdle(t)
	}

	outcomes := tp.rec.wait(t, sent)
	if len(outcomes) != sent {
		t.Errorf("%d outcomes for %d requests; want exactly one each", len(outcomes), sent)
	}
	admitted := 0
	kinds := map[Kind]int{}
	for _, o := range outcomes {
		kinds[o.Kind]++
		if o.Admitted {
			admitted++
		}
		switch o.Kind {
		case OK, ClientClosed:
		default:
			t.Errorf("outcome %v (status %d); want ok or client_closed", o.Kind, o.Status)
		}
	}
	t.Logf("outcomes: %v", kinds)
	if kinds[ClientClosed] == 0 {
		t.Errorf("no client_closed among %v; the clients' leaving was not seen", kinds)
	}
	if n := up.requests.Load(); n != int64(admitted) {
		t.Errorf("upstream saw %d requests; want %d, the admitted ones", n, admitted)
	}
	if m := up.most.Load(); m > workers {
		t.Errorf("upstream held %d requests at once; want at most %d", m, workers)
	}
}

// TestLeaversOfAFastQueueNeverReachTheUpstream: clients that send a request
// and close at once, into a queue that moves in milliseconds, faster than
// the departure watch's first peek. A request admitted after its client
// closed must not reach the upstream. Only a request admitted before, such
// as one admitted at once, which no check delays, may.
func TestLeaversOfAFastQueueNeverReachTheUpstream(t *testing.T) {
	const (
		workers  = 4
		clients  = 1000
		parallel = 30
	)
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(time.Millisecond)
		io.WriteString(w, "ok")
	})
	tp := startProxy(t, up.URL, limiter.Config{
		Mode: limiter.Fixed, Workers: workers, QueueSize: clients, QueueTimeout: time.Minute,
	}, func(c *Config) { c.Logger = discardLogger() })

	// took[i] is how long client i took from starting its write to
	// having closed: its request cannot have been read before the start,
	// so one that queued for longer than this was admitted after the close.
	took := make([]time.Duration, clients)
	next := make(chan int)
	done := make(chan struct{})
	for range parallel {
		go func() {
			for i := range next {
				c, err := net.Dial("tcp", tp.addr)
				if err != nil {
					t.Errorf("dial: %v", err)
					continue
				}
				start := time.Now()
				io.WriteString(c, get(fmt.Sprintf("/leave?%d", i)))
				c.Close()
				took[i] = time.Since(start)
			}
			done <- struct{}{}
		}()
	}
	for i := range clients {
		next <- i
	}
	close(next)
	for range parallel {
		<-done
	}
	outcomes := tp.rec.wait(t, clients)
	tp.waitIdle(t)

	var waited, forwarded, afterClose int
	for _, o := range outcomes {
		i, err := strconv.Atoi(strings.TrimPrefix(string(o.Target), "/leave?"))
		if err != nil {
			t.Fatalf("target %q", o.Target)
		}
		if o.Queue > 0 {
			waited++
		}
		if o.Admitted {
			forwarded++
			if o.Queue > took[i]+time.Millisecond {
				afterClose++
			}
		}
	}
	t.Logf("%d requests, %d waited, %d forwarded, %d of them admitted after their clients closed", clients, waited, forwarded, afterClose)
	if waited < clients/2 {
		t.Fatalf("only %d of %d requests waited; the queue was not exercised", waited, clients)
	}
	if afterClose > 0 {
		t.Errorf("%d requests admitted after their clients had closed were forwarded; want none", afterClose)
	}
	if n := up.requests.Load(); n != int64(forwarded) {
		t.Errorf("upstream saw %d requests; want %d, the admitted ones", n, forwarded)
	}
}
