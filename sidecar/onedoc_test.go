package sidecar

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/loomgate/loomgate/internal/upstreamtest"
)

// TestAdviceIsOneDocument: in every mode, enforced and in a dry run, the
// advice's text (loomgate advise), its JSON (/advice) and the status page
// are one document rendered three ways. Read from the same snapshot (the
// AdviceTimeHeader of both answers), the text says the JSON's summary and
// reasons word for word, its throughput, its verdict on the upstream, the
// mode and limit of its settings, and each prediction at the JSON's
// figures; the page reads nothing but that JSON. A dry run of adaptive
// mode is advised as adaptive mode, and says what ending it enforces.
func TestAdviceIsOneDocument(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"fixed", "unbounded", "adaptive"} {
		for _, dry := range []bool{false, true} {
			name := mode
			if dry {
				name = "a dry run of " + mode
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				env := []string{"LOOMGATE_UPSTREAM=" + upstreamtest.HiddenPool(t, 10, 50*time.Millisecond),
					"LOOMGATE_MODE=" + mode, "LOOMGATE_WORKERS=20", "LOOMGATE_DRY_RUN=" + fmt.Sprint(dry)}
				s := start(t, testConfig(t, env...))
				// Light load, from which the estimate learns the pool's
				// unloaded speed, then four times the pool: saturated, the
				// case whose advice differed by where it was read.
				var wg sync.WaitGroup
				light := make(chan struct{})
				closedLoop(s.URL+"/r", 4, light, &wg)
				time.Sleep(11 * time.Second)
				close(light)
				heavy := make(chan struct{})
				closedLoop(s.URL+"/r", 40, heavy, &wg)
				time.Sleep(5 * time.Second)
				close(heavy)
				wg.Wait()
				doc, text := sameSnapshot(t, s)
				oneDocument(t, mode, dry, doc, text)
			})
		}
	}
	t.Run("the page", func(t *testing.T) {
		// The page renders /advice's JSON and fetches nothing else.
		page := string(statusPage)
		if n := strings.Count(page, "fetch("); n != 1 || !strings.Contains(page, `fetch("advice", { cache: "no-store" })`) {
			t.Errorf("the status page fetches %d times; want once, /advice's JSON, uncached", n)
		}
	})
}

// sameSnapshot is /advice as JSON and as text, made from one snapshot.
func sameSnapshot(t *testing.T, s *running) (AdviceDoc, string) {
	t.Helper()
	for range 20 {
		jsonAt, body := adviceAnswer(t, s.AdminURL+"/advice")
		textAt, text := adviceAnswer(t, s.AdminURL+"/advice?format=text")
		if jsonAt == "" || textAt == "" {
			t.Fatalf("/advice answered without %s", AdviceTimeHeader)
		}
		if jsonAt != textAt {
			continue // a snapshot taken between the two
		}
		var doc AdviceDoc
		if err := json.Unmarshal([]byte(body), &doc); err != nil {
			t.Fatal(err)
		}
		if got := doc.Time.Format(time.RFC3339Nano); got != jsonAt {
			t.Errorf("the JSON's time %s; its %s says %s", got, AdviceTimeHeader, jsonAt)
		}
		return doc, text
	}
	t.Fatal("20 pairs of answers, none from one snapshot")
	return AdviceDoc{}, ""
}

func adviceAnswer(t *testing.T, url string) (at, body string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s = %d %s", url, resp.StatusCode, b)
	}
	return resp.Header.Get(AdviceTimeHeader), string(b)
}

// oneDocument holds the text to the JSON of the same snapshot.
func oneDocument(t *testing.T, mode string, dry bool, doc AdviceDoc, text string) {
	t.Helper()
	f, r := doc.Figures, doc.Recommendation
	t.Logf("%s", r.Summary)
	defer func() {
		if t.Failed() {
			t.Logf("text:\n%s", text)
		}
	}()
	if doc.Settings.Mode != mode || doc.Settings.DryRun != dry {
		t.Errorf("settings: mode %q, dry run %v; want %q, %v", doc.Settings.Mode, doc.Settings.DryRun, mode, dry)
	}
	head := "Mode " + mode
	if dry {
		head = "Dry run of MODE=" + mode
	}
	if !strings.HasPrefix(text, head) {
		t.Errorf("the text begins %q; want %q", text[:min(len(text), 60)], head)
	}
	if f.Requests < 100 {
		t.Fatalf("%d requests in the window; want at least 100, enough to advise on", f.Requests)
	}
	// The verdict: the summary and every reason, word for word.
	if r.Summary == "" || !strings.Contains(text, "\n"+r.Summary+"\n") {
		t.Errorf("the text lacks the JSON's summary %q", r.Summary)
	}
	for _, reason := range r.Reasons {
		if !strings.Contains(text, "- "+reason+"\n") {
			t.Errorf("the text lacks the JSON's reason %q", reason)
		}
	}
	// The numbers: throughput, the upstream's verdict, each prediction.
	if want := fmt.Sprintf("throughput %.0f rps", f.Throughput); !strings.Contains(text, want) {
		t.Errorf("the text lacks %q, the JSON's throughput", want)
	}
	switch sat := f.UpstreamSaturated; {
	case sat == nil:
		if !strings.Contains(text, "Upstream saturation "+f.SaturatedUnknown) {
			t.Errorf("the JSON's upstream_saturated is null (%s); the text does not say so", f.SaturatedUnknown)
		}
	case *sat:
		if !strings.Contains(text, "Upstream saturated") {
			t.Errorf("the JSON says the upstream is saturated; the text does not")
		}
	case len(f.SaturatedRoutesAlone) == 0:
		if !strings.Contains(text, "Upstream not saturated") {
			t.Errorf("the JSON says the upstream is not saturated; the text does not")
		}
	}
	for _, p := range r.Predictions {
		if want := fmt.Sprintf("- %s (%s): %.0f rps", p.Name, p.Setting, p.Throughput); !strings.Contains(text, want) {
			t.Errorf("the text lacks %q, the JSON's prediction", want)
		}
	}
	// The limit.
	if mode == "adaptive" {
		if doc.Adaptive == nil {
			t.Fatal("adaptive mode's JSON has no adaptive object")
		}
		want := "Adaptive limit: none yet"
		if l := doc.Adaptive.Limit; l > 0 {
			want = fmt.Sprintf("Adaptive limit: %d.", l)
			if !strings.Contains(text, fmt.Sprintf("limit %d", l)) {
				t.Errorf("the text's settings do not name the JSON's adaptive limit, %d", l)
			}
		}
		if !strings.Contains(text, want) {
			t.Errorf("the text lacks %q, the JSON's adaptive limit", want)
		}
		// Enforced or in a dry run, adaptive mode is told no variable to
		// set, and a dry run of it never a fixed limit to enforce.
		if r.Mode != "adaptive" || r.Workers != 0 || r.Bulkhead != 0 || strings.Contains(r.Summary, "Cap admission at") {
			t.Errorf("recommendation: mode %q, workers %d, bulkhead %d, %q; want adaptive mode's advice", r.Mode, r.Workers, r.Bulkhead, r.Summary)
		}
	}
	// A dry run is never told to set what it refuses at start.
	if dry && strings.Contains(r.Summary, "LOOMGATE_PROBE=on") {
		t.Errorf("the dry run's summary %q; want no LOOMGATE_PROBE=on, which a dry run refuses", r.Summary)
	}
	// A dry run says what ending it would enforce, by name.
	if dry && strings.Contains(r.Summary, "LOOMGATE_DRY_RUN=false") {
		want := "To enforce MODE=" + mode
		if mode == "adaptive" {
			want = "To enforce adaptive mode, set LOOMGATE_DRY_RUN=false"
		}
		if !strings.Contains(r.Summary, want) {
			t.Errorf("the dry run's summary %q; want it to say %q", r.Summary, want)
		}
	}
}
