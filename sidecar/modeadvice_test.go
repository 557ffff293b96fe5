package sidecar

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// The advice of a running sidecar, text and JSON, speaks the mode in
// force: adaptive mode (with a leftover LOOMGATE_WORKERS) gets no
// variable to edit and says its own limit; a dry run says it is one and
// what its mode would have done.
func TestAdviceSpeaksTheModeInForce(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs load for 6 s per mode")
	}
	tests := []struct {
		name string
		env  []string
		// mode is recommendation.mode; text and summary, what the text and
		// the summary begin with; prediction, a prediction's name.
		mode, text, summary, prediction string
		dryRun                          bool
	}{
		{"adaptive, a leftover WORKERS", []string{"LOOMGATE_MODE=adaptive", "LOOMGATE_WORKERS=20"},
			"adaptive", "Mode adaptive", "", "in force", false},
		{"a dry run of fixed", []string{"LOOMGATE_MODE=fixed", "LOOMGATE_WORKERS=20", "LOOMGATE_DRY_RUN=true"},
			"", "Dry run of MODE=fixed, WORKERS=20", "A dry run of MODE=fixed, WORKERS=20", "dry run", true},
		{"a dry run of adaptive", []string{"LOOMGATE_MODE=adaptive", "LOOMGATE_DRY_RUN=true"},
			"", "Dry run of MODE=adaptive", "A dry run of MODE=adaptive", "dry run", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			up := upstream(t, 20*time.Millisecond)
			s := start(t, testConfig(t, append(tt.env, "LOOMGATE_UPSTREAM="+up)...))
			var wg sync.WaitGroup
			stop := make(chan struct{})
			closedLoop(s.URL+"/r", 10, stop, &wg)
			time.Sleep(6 * time.Second)
			close(stop)
			wg.Wait()
			doc := adviceDoc(t, s)
			resp, err := http.Get(s.AdminURL + "/advice?format=text")
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			text, r := string(b), doc.Recommendation
			t.Logf("%s", text)
			if !strings.HasPrefix(text, tt.text) {
				t.Errorf("the text begins %q; want %q", text[:min(len(text), 80)], tt.text)
			}
			if tt.mode != "" && r.Mode != tt.mode {
				t.Errorf("recommendation.mode = %q; want %q", r.Mode, tt.mode)
			}
			if tt.mode == "adaptive" {
				if r.Workers != 0 || r.Bulkhead != 0 || r.Probe != 0 {
					t.Errorf("recommendation workers %d, bulkhead %d, probe %d; want no variable to edit in adaptive mode", r.Workers, r.Bulkhead, r.Probe)
				}
				for _, p := range r.Predictions {
					if p.Name == "in force" && !strings.HasPrefix(p.Setting, "MODE=adaptive") {
						t.Errorf("in force: %q; want adaptive mode", p.Setting)
					}
				}
				if strings.Contains(r.Summary, "LOOMGATE_WORKERS=20") || strings.Contains(text, "WORKERS=20") {
					t.Errorf("the advice speaks of the leftover LOOMGATE_WORKERS=20:\n%s", text)
				}
			}
			if doc.Settings.DryRun != tt.dryRun {
				t.Errorf("settings.dry_run = %v; want %v", doc.Settings.DryRun, tt.dryRun)
			}
			if tt.summary != "" && !strings.HasPrefix(r.Summary, tt.summary) {
				t.Errorf("summary %q; want it to begin %q", r.Summary, tt.summary)
			}
			found := false
			for _, p := range r.Predictions {
				found = found || p.Name == tt.prediction
			}
			if !found {
				t.Errorf("predictions %+v; want one named %q", r.Predictions, tt.prediction)
			}
		})
	}
}
