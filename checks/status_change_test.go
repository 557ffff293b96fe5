package checks

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/loomgate/loomgate/sidecar/sidecartest"
)

// statusView is what the status page shows, read from its elements.
type statusView struct {
	InFlight, Queued                  string
	ThroughputLabel, ThroughputMinute string
	QueueLabel, QueueRecent, Share    string
	ServiceLabel, ServiceRecent       string
	RejectedLabel, AdviceSpan         string
	AdviceNow, Advice                 string
	Predictions                       [][]string
}

const readStatusView = `(() => {
  const t = (sel) => document.querySelector(sel).textContent;
  const labels = [...document.querySelectorAll(".card .label")].map((e) => e.textContent);
  return {
    InFlight: t("#inflight"), Queued: t("#queued"),
    ThroughputLabel: t("#throughputlabel"), ThroughputMinute: t("#throughputminute"),
    QueueLabel: labels.find((l) => l.startsWith("Queue wait")), QueueRecent: t("#queuerecent"), Share: t("#queueshare"),
    ServiceLabel: labels.find((l) => l.startsWith("Service")), ServiceRecent: t("#servicerecent"),
    RejectedLabel: labels.find((l) => l.startsWith("Rejected")), AdviceSpan: t("#advice h2 .span"),
    AdviceNow: t("#advicenow"), Advice: t("#advicetext"),
    Predictions: [...document.querySelectorAll("#predictions tbody tr")].map((tr) => [...tr.cells].map((c) => c.textContent)),
  };
})()`

// TestStatusPageUnderChangingLoad loads the status page in headless
// Chromium while the load rises from below the limit to a full limit and a
// queue, and checks that every figure names its interval, that the last
// few seconds are shown beside the minute, and that the advice's headline,
// which reads the minute, never contradicts the live cards.
func TestStatusPageUnderChangingLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("drives a browser under load")
	}
	chromium := sidecartest.RequireTool(t, "chromium", "chromium")
	const workers, light, heavy = 4, 3, 8
	upURL, _ := slowUpstream(t, 50*time.Millisecond)
	s := startSidecar(t, map[string]string{
		"LOOMGATE_MODE": "fixed", "LOOMGATE_WORKERS": "4", "LOOMGATE_UPSTREAM": upURL,
	})

	loadCtx, stopLoad := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: heavy}}
	clients := func(n int) {
		for range n {
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
	}
	defer wg.Wait()
	defer stopLoad()

	ctx := headlessChromium(t, chromium)
	if err := chromedp.Do(ctx, chromedp.Navigate(s.AdminURL+"/")); err != nil {
		t.Fatal(err)
	}
	view := func() statusView {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[statusView](readStatusView))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	poll := func(what, cond string, timeout time.Duration) {
		t.Helper()
		pctx, cancel := context.WithTimeout(ctx, timeout+5*time.Second)
		defer cancel()
		if _, err := chromedp.Run(pctx, chromedp.Poll[chromedp.Void](cond, chromedp.WithPollingTimeout(timeout))); err != nil {
			b, _ := json.MarshalIndent(view(), "", "  ")
			t.Fatalf("page never showed %s: %v\n%s", what, err, b)
		}
	}

	// Below the limit: advice from a calm minute, and no word of a change.
	clients(light)
	poll("advice for the light load", `!document.getElementById("advicetext").textContent.startsWith("Not enough") &&
		document.querySelectorAll("#predictions tbody tr").length >= 2`, 30*time.Second)
	time.Sleep(6 * time.Second)
	calm := view()
	logView(t, "light load", calm)
	checkLabels(t, calm)
	if calm.AdviceNow != "" {
		t.Errorf("below the limit the page says %q; want nothing about a change of load", calm.AdviceNow)
	}
	checkPredictionRows(t, calm)

	// The load rises: the limit is full and requests queue. The minute
	// still mostly holds the light load.
	clients(heavy - light)
	poll("the full limit and a queue", `document.getElementById("inflight").textContent === "4" &&
		Number(document.getElementById("queued").textContent) > 0`, 20*time.Second)
	contradictions := 0
	var last statusView
	for end := time.Now().Add(9 * time.Second); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		v := view()
		last = v
		checkLabels(t, v)
		minuteShare, _ := sharePercents(t, v.Share)
		if v.InFlight == "4" && v.Queued != "0" && minuteShare < 50 {
			contradictions++
			if !strings.Contains(v.AdviceNow, "now 4 of 4 in flight") || !strings.Contains(v.AdviceNow, "averages the last 60 s") {
				t.Errorf("live cards show %s of %d in flight and %s queued, the minute %d%% of request time queued, advice %q; want the headline to say the load rose and that the advice averages the last 60 s, not %q",
					v.InFlight, workers, v.Queued, minuteShare, v.Advice, v.AdviceNow)
			}
		}
	}
	logView(t, "risen load", last)
	if contradictions == 0 {
		t.Errorf("never saw the minute calm while the limit was full; the test did not exercise the headline")
	}
	// After some seconds at the full limit the recent figures are the live
	// cards' load: a queue, and more of the request time in it than over
	// the minute.
	minuteShare, recentShare := sharePercents(t, last.Share)
	if recentShare <= minuteShare || !strings.HasPrefix(last.QueueRecent, "mean ") || strings.HasPrefix(last.QueueRecent, "mean 0 ms") {
		t.Errorf("after seconds of a full limit and a queue: recent %q, share %q; want a queue wait over the last seconds, and a larger share than the minute's", last.QueueRecent, last.Share)
	}
}

var (
	recentLabel = regexp.MustCompile(`last \d+ s$`)
	sharePct    = regexp.MustCompile(`^(\d+)% of request time is queue, last 60 s, (\d+)% last \d+ s$`)
)

// checkLabels wants every figure to name its interval.
func checkLabels(t *testing.T, v statusView) {
	t.Helper()
	for _, c := range []struct{ what, got, want string }{
		{"throughput label", v.ThroughputLabel, "Throughput · last "},
		{"throughput's minute", v.ThroughputMinute, " over the last 60 s"},
		{"queue wait label", v.QueueLabel, "Queue wait p50 / p99 · last 60 s"},
		{"service label", v.ServiceLabel, "Service p50 / p99 · last 60 s"},
		{"rejected label", v.RejectedLabel, "Rejected · last 60 s"},
		{"advice", v.AdviceSpan, "from the last 60 s"},
	} {
		if !strings.Contains(c.got, c.want) {
			t.Errorf("%s = %q; want it to contain %q", c.what, c.got, c.want)
		}
	}
	for what, got := range map[string]string{"throughput label": v.ThroughputLabel, "recent queue wait": v.QueueRecent, "recent service": v.ServiceRecent} {
		if !recentLabel.MatchString(got) {
			t.Errorf("%s = %q; want it to end with its interval, last N s", what, got)
		}
	}
}

// sharePercents reads the queue card's shares: the minute's and the
// recent seconds'.
func sharePercents(t *testing.T, s string) (minute, recent int) {
	t.Helper()
	m := sharePct.FindStringSubmatch(s)
	if m == nil {
		t.Fatalf("queue share = %q; want the minute's and the last seconds'", s)
	}
	return atoi(m[1]), atoi(m[2])
}

func atoi(s string) int {
	n := 0
	for _, c := range s {
		n = n*10 + int(c-'0')
	}
	return n
}

// checkPredictionRows wants every setting once: a recommendation that is
// one of the alternatives shares its row.
func checkPredictionRows(t *testing.T, v statusView) {
	t.Helper()
	seen := map[string]bool{}
	merged := false
	for _, row := range v.Predictions {
		name, setting, _ := strings.Cut(row[0], " · ")
		if seen[setting] {
			t.Errorf("prediction rows name %q twice: %q", setting, v.Predictions)
		}
		seen[setting] = true
		merged = merged || strings.Contains(name, " = ")
	}
	// A fixed limit that holds nothing back, below a saturation the advice
	// knows of: the recommendation is unbounded itself. (Seen at one load
	// only, whether the upstream is saturated is unknown, and the advice
	// recommends nothing: no row to merge.)
	if strings.Contains(v.Advice, "keep the simpler one") && !merged {
		t.Errorf("prediction rows %q; want the recommendation and unbounded in one row", v.Predictions)
	}
}

func logView(t *testing.T, when string, v statusView) {
	t.Helper()
	t.Logf("%s: in flight %s, queued %s; %s %s; queue %s; %s; now %q; advice %q", when, v.InFlight, v.Queued,
		v.ThroughputLabel, v.ThroughputMinute, v.QueueRecent, v.Share, v.AdviceNow, v.Advice)
}

// headlessChromium starts a headless Chromium of its own, stopped at the
// end of the test.
func headlessChromium(t *testing.T, chromium string) context.Context {
	t.Helper()
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
	t.Cleanup(cancelAlloc)
	// No timeout on the browser's own context: it would stop the browser.
	ctx, cancel := chromedp.NewContext(allocCtx)
	t.Cleanup(cancel)
	return ctx
}
