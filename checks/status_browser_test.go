package checks

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/loomgate/loomgate/sidecar/sidecartest"
)

// screenshotPath is where TestStatusPageInBrowser keeps its screenshot when
// UPDATE_SCREENSHOT=1, for the README.
const screenshotPath = "docs/status-page.png"

// TestStatusPageInBrowser loads the status page in headless Chromium while
// the sidecar is under load and checks it shows the live numbers.
func TestStatusPageInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("drives a browser under load")
	}
	chromium := sidecartest.RequireTool(t, "chromium", "chromium")
	const workers, clients = 4, 20
	upURL, _ := slowUpstream(t, 200*time.Millisecond)
	s := startSidecar(t, map[string]string{
		"LOOMGATE_MODE": "fixed", "LOOMGATE_WORKERS": strconv.Itoa(workers), "LOOMGATE_UPSTREAM": upURL,
		// A priority level, for the levels card.
		"LOOMGATE_ROUTES": "work=/work", "LOOMGATE_PRIORITIES": "work=critical",
	})

	loadCtx, stopLoad := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
	for range clients {
		wg.Go(func() {
			for loadCtx.Err() == nil {
				req, _ := http.NewRequestWithContext(loadCtx, "GET", s.URL+"/work", nil)
				if resp, err := client.Do(req); err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
		})
	}
	defer wg.Wait()
	defer stopLoad()
	waitUntil(t, func() bool { return s.Stats().Queued >= clients-workers-2 })

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.WindowSize(1200, 820),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	// No timeout on the browser's own context: it would stop the browser.
	ctx, cancel := chromedp.NewContext(allocCtx)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate(s.AdminURL+"/")); err != nil {
		t.Fatal(err)
	}

	// The page refreshes every second; wait until it shows this load: all
	// workers busy, a queue, throughput and queue wait above zero.
	pollCtx, cancelPoll := context.WithTimeout(ctx, 50*time.Second)
	defer cancelPoll()
	_, err := chromedp.Run(pollCtx, chromedp.Poll[chromedp.Void](`document.getElementById("inflight").textContent === "4" &&
		Number(document.getElementById("queued").textContent) >= 10 &&
		Number(document.getElementById("throughput").textContent) > 0 &&
		!document.getElementById("queue").textContent.startsWith("0 ms")`, chromedp.WithPollingTimeout(45*time.Second)))
	if err != nil {
		shown, _ := chromedp.Run(ctx, chromedp.Text("main"))
		t.Fatalf("page never showed the live load: %v\npage text:\n%s", err, shown)
	}
	text := func(sel string) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Text(sel))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return v
	}
	inFlight, queued, throughput, queue, mode, inactive := text("#inflight"), text("#queued"), text("#throughput"), text("#queue"), text("#mode"), text("#inactive")
	t.Logf("page shows in flight %s, queued %s, throughput %s rps, queue p50/p99 %s (%s)", inFlight, queued, throughput, queue, mode)
	if !strings.Contains(mode, "mode fixed") || !strings.Contains(mode, "limit 4") {
		t.Errorf("header = %q; want the mode and limit", mode)
	}
	if inactive != "inactive: bulkhead off" {
		t.Errorf("inactive settings = %q; want the other mode's, \"inactive: bulkhead off\"", inactive)
	}
	// The route class and the predictions, once the window holds enough
	// requests for advice.
	tablesCtx, cancelTables := context.WithTimeout(ctx, 30*time.Second)
	defer cancelTables()
	if _, err := chromedp.Run(tablesCtx, chromedp.Poll[chromedp.Void](`document.querySelector("#routes tbody").textContent.includes("work") &&
		document.querySelectorAll("#predictions tbody tr").length >= 2 &&
		!document.getElementById("levelscard").hidden`, chromedp.WithPollingTimeout(25*time.Second))); err != nil {
		shown, _ := chromedp.Run(ctx, chromedp.Text("main"))
		t.Fatalf("page never showed the route, the predictions and the levels: %v\npage text:\n%s", err, shown)
	}
	// Every request is critical: one row, its rate, a p99 and no shedding.
	if lv := text("#levels tbody"); !regexp.MustCompile(`^critical\s*[0-9.]+\s*[0-9.]+ m?s\s*[0-9.]+ m?s\s*–$`).MatchString(strings.TrimSpace(lv)) {
		t.Errorf("levels card = %q; want one row: critical, rps, latency p99, queue wait p99, no shedding", lv)
	}
	if q, _ := strconv.Atoi(queued); q > clients-workers {
		t.Errorf("page shows %d queued; at most %d can be", q, clients-workers)
	}
	settle := 1500 * time.Millisecond
	if os.Getenv("UPDATE_SCREENSHOT") == "1" {
		// The README's picture: wait for the advice and a few buckets of
		// history.
		adviceCtx, cancelAdvice := context.WithTimeout(ctx, 90*time.Second)
		defer cancelAdvice()
		if _, err := chromedp.Run(adviceCtx, chromedp.Poll[chromedp.Void](`!document.getElementById("advicetext").textContent.startsWith("Not enough")`,
			chromedp.WithPollingTimeout(85*time.Second))); err != nil {
			t.Fatalf("no advice on the page: %v", err)
		}
		settle = 20 * time.Second
	}
	if err := chromedp.Do(ctx, chromedp.Sleep(settle)); err != nil {
		t.Fatal(err)
	}
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	if len(shot) < 10_000 {
		t.Errorf("screenshot is %d bytes; want a rendered page", len(shot))
	}
	if os.Getenv("UPDATE_SCREENSHOT") == "1" {
		if err := os.WriteFile(fromRepoRoot(screenshotPath), shot, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestStatusPageShowsUpstreamDown loads the status page in headless
// Chromium while nothing listens at the upstream's address, then starts
// an upstream there: the page says the upstream is not answering, since
// when, how many requests failed and why, and what /readyz makes of it;
// then that it answers again.
func TestStatusPageShowsUpstreamDown(t *testing.T) {
	if testing.Short() {
		t.Skip("drives a browser")
	}
	chromium := sidecartest.RequireTool(t, "chromium", "chromium")
	// The upstream's port is held until the sidecar listens, so that the
	// kernel cannot hand it to the sidecar; closed, nothing answers there.
	down, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := down.Addr().String()
	s := startSidecar(t, map[string]string{"LOOMGATE_UPSTREAM": "http://" + addr})
	down.Close()
	const n = 3
	for range n {
		resp, err := http.Get(s.URL + "/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 502 {
			t.Fatalf("GET / with nothing at the upstream = %d; want 502", resp.StatusCode)
		}
	}

	ctx := headlessChromium(t, chromium)
	if err := chromedp.Do(ctx, chromedp.Navigate(s.AdminURL+"/")); err != nil {
		t.Fatal(err)
	}
	state := func() (text, class string) {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[document.getElementById("upstreamstate").textContent, document.getElementById("upstreamstate").className]`))
		if err != nil || len(v) != 2 {
			t.Fatalf("reading the page: %v", err)
		}
		return v[0], v[1]
	}
	poll := func(what, cond string) {
		t.Helper()
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if _, err := chromedp.Run(pctx, chromedp.Poll[chromedp.Void](cond, chromedp.WithPollingTimeout(25*time.Second))); err != nil {
			text, _ := state()
			t.Fatalf("page never showed %s: %v\nupstream line: %q", what, err, text)
		}
	}
	poll("the upstream down", `document.getElementById("upstreamstate").textContent.includes("3 requests failed")`)
	text, class := state()
	t.Logf("upstream down: %q", text)
	for _, want := range []string{"not answering since ", "3 requests failed", "connection refused", "/readyz 503: upstream not reached yet"} {
		if !strings.Contains(text, want) {
			t.Errorf("upstream line = %q; want %q in it", text, want)
		}
	}
	if class != "down" {
		t.Errorf("upstream line's class = %q; want down (red)", class)
	}

	ln, err := net.Listen("tcp", addr)
	for i := 0; err != nil && i < 50; i++ {
		// Another program may hold the port an instant.
		time.Sleep(100 * time.Millisecond)
		ln, err = net.Listen("tcp", addr)
	}
	if err != nil {
		t.Fatalf("listen on the upstream's address: %v", err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	resp, err := http.Get(s.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET / with the upstream up = %d; want 200", resp.StatusCode)
	}
	poll("the upstream back", `document.getElementById("upstreamstate").textContent === "answering"`)
	if _, class := state(); class != "" {
		t.Errorf("upstream line's class once back = %q; want none", class)
	}
}
