package checks

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/loomgate/loomgate/sidecar"
	"github.com/loomgate/loomgate/sidecar/sidecartest"
)

// TestStatusPageAgreesWithAdvice: a dry run of adaptive mode in front of
// a pool of 10 at 50 ms, light load and then four times the pool, the
// case in which the status page said "Below saturation the modes are
// equivalent … LOOMGATE_MODE=unbounded" and its route "1.1×, unloaded"
// while /advice advised a fixed limit and said the route saturated. In
// headless Chromium, the page's verdict, summary, upstream line and route
// row are read at once with the time of the document it rendered, and
// held to /advice's JSON of that same snapshot; the summary is adaptive
// mode's, and says what ending the dry run enforces.
func TestStatusPageAgreesWithAdvice(t *testing.T) {
	if testing.Short() {
		t.Skip("drives a browser under load")
	}
	chromium := sidecartest.RequireTool(t, "chromium", "chromium")
	s := startSidecar(t, map[string]string{
		"LOOMGATE_MODE": "adaptive", "LOOMGATE_DRY_RUN": "true", "LOOMGATE_UPSTREAM": hiddenPool(t, 10, 50*time.Millisecond),
	})
	load := func(clients int, d time.Duration) {
		ctx, stop := context.WithTimeout(context.Background(), d)
		defer stop()
		var wg sync.WaitGroup
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
		for range clients {
			wg.Go(func() {
				for ctx.Err() == nil {
					req, _ := http.NewRequestWithContext(ctx, "GET", s.URL+"/r", nil)
					if resp, err := client.Do(req); err == nil {
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					}
				}
			})
		}
		wg.Wait()
	}
	load(4, 11*time.Second)
	load(40, 5*time.Second)

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(allocCtx)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate(s.AdminURL+"/")); err != nil {
		t.Fatal(err)
	}

	// What the page shows, read in one evaluation with the time of the
	// document it rendered.
	type shown struct {
		Time, Mode, Summary, Capacity, Routes string
	}
	read := func() shown {
		t.Helper()
		p, err := chromedp.Run(ctx, chromedp.Evaluate[shown](`({
			Time: document.body.dataset.adviceTime || "",
			Mode: document.getElementById("mode").textContent,
			Summary: document.getElementById("advicetext").textContent,
			Capacity: document.getElementById("capacity").textContent,
			Routes: [...document.querySelectorAll("#routes tbody tr")].map((tr) => [...tr.cells].map((c) => c.textContent).join(" | ")).join("\n"),
		})`))
		if err != nil {
			t.Fatalf("reading the page: %v", err)
		}
		return p
	}
	var page shown
	var doc sidecar.AdviceDoc
	for i := 0; ; i++ {
		if i == 40 {
			t.Fatalf("the page never showed a document /advice also answered with; last shown at %q: %+v", page.Time, page)
		}
		at, d := adviceJSON(t, s.AdminURL)
		if page = read(); page.Time == at {
			doc = d
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Logf("page: %+v", page)
	f, r := doc.Figures, doc.Recommendation
	if f.Requests < 100 {
		t.Fatalf("%d requests in the window; want enough to advise on", f.Requests)
	}
	if page.Summary != r.Summary {
		t.Errorf("the page's advice %q; /advice's summary %q", page.Summary, r.Summary)
	}
	if r.Mode != "adaptive" || strings.Contains(r.Summary, "Cap admission at") || !strings.Contains(r.Summary, "To enforce adaptive mode, set LOOMGATE_DRY_RUN=false") {
		t.Errorf("a dry run of adaptive mode advised as %s: %q; want adaptive mode's advice, and what ending the dry run enforces", r.Mode, r.Summary)
	}
	if !strings.Contains(page.Mode, "mode adaptive (dry run") {
		t.Errorf("the page's header %q; want adaptive mode, in a dry run", page.Mode)
	}
	verdict := "not saturated"
	switch sat := f.UpstreamSaturated; {
	case sat == nil:
		verdict = "saturation " + f.SaturatedUnknown
	case *sat:
		verdict = "saturated"
	case len(f.SaturatedRoutesAlone) > 0:
		verdict = "saturated behind " + strings.Join(f.SaturatedRoutesAlone, ", ") + " only"
	}
	if !strings.HasPrefix(page.Capacity, verdict+" ·") {
		t.Errorf("the page's upstream line %q; /advice's verdict %q", page.Capacity, verdict)
	}
	if len(f.Routes) == 0 {
		t.Fatal("/advice has no route")
	}
	for _, rt := range f.Routes {
		want := "unloaded"
		switch {
		case rt.Saturated:
			want = "queues inside"
			if rt.Capacity != nil {
				want += fmt.Sprintf(", capacity %.0f", math.Round(*rt.Capacity))
			}
		case rt.SlowerWithoutLoad:
			want = "slower, same load"
		}
		stretch := "–"
		if rt.Stretch > 0 {
			stretch = fmt.Sprintf("%.1f×", rt.Stretch)
		}
		if row := rt.Name + " |"; !strings.Contains(page.Routes, row) || !strings.Contains(page.Routes, "| "+stretch+" | "+want) {
			t.Errorf("the page's routes %q; want %s at stretch %s, %s, as /advice says", page.Routes, rt.Name, stretch, want)
		}
	}
}

// adviceJSON is /advice's document and the time of its snapshot.
func adviceJSON(t *testing.T, admin string) (string, sidecar.AdviceDoc) {
	t.Helper()
	resp, err := http.Get(admin + "/advice")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var doc sidecar.AdviceDoc
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	return resp.Header.Get(sidecar.AdviceTimeHeader), doc
}

// hiddenPool is an upstream on loopback that serves size requests at once,
// each for d, and queues the rest inside, where the sidecar cannot see.
func hiddenPool(t *testing.T, size int, d time.Duration) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	workers := make(chan struct{}, size)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case workers <- struct{}{}:
		case <-r.Context().Done():
			return
		}
		time.Sleep(d)
		<-workers
		io.WriteString(w, "ok")
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}
