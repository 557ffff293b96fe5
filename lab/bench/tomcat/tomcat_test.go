package tomcat

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/loomgate/loomgate/lab/stub"
	"github.com/loomgate/loomgate/lab/stub/stubtest"
)

// requireTomcat skips the test where java or Tomcat is missing, or fails
// it with REQUIRE_TEST_TOOLS=1 (set by CI), so that CI cannot pass by
// skipping.
func requireTomcat(t *testing.T) {
	t.Helper()
	if err := Available(); err != nil {
		if os.Getenv("REQUIRE_TEST_TOOLS") == "1" {
			t.Fatalf("%v, and REQUIRE_TEST_TOOLS=1", err)
		}
		t.Skip(err)
	}
}

// TestStartServesTheJSPsWithinItsPool starts a real Tomcat with 10
// threads in front of a real stub: each JSP answers, /call.jsp reaches
// the stub, and 30 requests of 300 ms sent at once take three turns of
// the pool, not one.
func TestStartServesTheJSPsWithinItsPool(t *testing.T) {
	requireTomcat(t)
	stubURL := stubtest.Start(t, stub.Config{})

	start := time.Now()
	s, err := Start(context.Background(), Config{MaxThreads: 10, StubURL: stubURL})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	t.Logf("started and warmed in %v", time.Since(start).Round(time.Millisecond))

	for page, want := range map[string]string{
		"/hello.jsp":       "hello",
		"/sleep.jsp?ms=20": "slept 20 ms",
		"/call.jsp?ms=20":  "called the stub for 20 ms",
	} {
		resp, err := http.Get(s.URL + page)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(body)) != want {
			t.Errorf("GET %s = %s %q; want 200 %q", page, resp.Status, strings.TrimSpace(string(body)), want)
		}
	}
	// The stub counts what /call.jsp asked of it: the warm-up's call and
	// the one above.
	resp, err := http.Get(stubURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(metrics), `loomgate_stub_requests_total{path="/wait"} 2`) {
		t.Errorf("the stub's /metrics has no 2 requests to /wait:\n%s", grepLines(string(metrics), "loomgate_stub_requests_total"))
	}

	// 30 at once on 10 threads: three turns of 300 ms, 900 ms; without a
	// pool it would be one turn. The upper bound leaves room for two
	// shared cores.
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 30}}
	var wg sync.WaitGroup
	errs := make(chan error, 30)
	begin := time.Now()
	for range 30 {
		wg.Go(func() {
			resp, err := client.Get(s.URL + "/sleep.jsp?ms=300")
			if err != nil {
				errs <- err
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				errs <- errors.New(resp.Status)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(begin)
	close(errs)
	for err := range errs {
		t.Errorf("GET /sleep.jsp?ms=300: %v", err)
	}
	if elapsed < 850*time.Millisecond || elapsed > 5*time.Second {
		t.Errorf("30 requests of 300 ms on 10 threads took %v; want about 900 ms (three turns)", elapsed)
	}

	s.Stop()
	if _, err := http.Get(s.URL + "/hello.jsp"); err == nil {
		t.Errorf("Tomcat still answers after Stop")
	}
}

// TestStartMissing names the package to install.
func TestStartMissing(t *testing.T) {
	_, err := Start(context.Background(), Config{MaxThreads: 1, Home: t.TempDir()})
	if !errors.Is(err, ErrMissing) || !strings.Contains(err.Error(), "apt-get install") {
		t.Errorf("Start with no Tomcat in Home = %v; want ErrMissing naming the package", err)
	}
}

func grepLines(s, substr string) string {
	var out []string
	for line := range strings.Lines(s) {
		if strings.Contains(line, substr) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "")
}
