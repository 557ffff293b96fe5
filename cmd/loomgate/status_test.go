package main

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/loomgate/loomgate/sidecar"
)

func TestStatusPage(t *testing.T) {
	upURL, _ := slowUpstream(t, 0)
	s := startSidecar(t, map[string]string{"LOOMGATE_MODE": "fixed", "LOOMGATE_WORKERS": "7", "LOOMGATE_UPSTREAM": upURL})
	for range 3 {
		resp, err := http.Get(s.URL + "/")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	resp, err := http.Get(s.AdminURL + "/advice")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("Content-Type = %q; want application/json", ct)
	}
	// What the page reads: settings, live state and the version.
	var doc sidecar.AdviceDoc
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	if st := doc.Settings; st.Mode != "fixed" || st.Workers != 7 || st.QueueSize != 10000 || doc.Version != version {
		t.Errorf("advice settings = %+v version %q; want fixed, 7 workers, queue 10000, %q", st, doc.Version, version)
	}
	if doc.Live.InFlight != 0 || doc.Live.Queued != 0 {
		t.Errorf("live = %+v; want nothing in flight after the requests finished", doc.Live)
	}
	page, err := http.Get(s.AdminURL + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(page.Body)
	page.Body.Close()
	if page.StatusCode != 200 || !strings.Contains(string(body), "<title>loomgate</title>") {
		t.Errorf("GET / = %d; want the status page", page.StatusCode)
	}
	// Self-contained: nothing the browser would fetch from elsewhere.
	for _, bad := range []string{"<script src", "<link", "http://", "https://", "@import"} {
		if strings.Contains(string(body), bad) {
			t.Errorf("status page contains %q; it must load nothing from outside the admin listener", bad)
		}
	}
}
