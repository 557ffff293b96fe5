package proxy

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/loomgate/loomgate/limiter"
	"github.com/loomgate/loomgate/route"
)

// TestOutcomeCarriesTheRouteClass: each request is classified as it meets
// admission, whatever its protocol, and its Outcome carries the class for
// every observer to read.
func TestOutcomeCarriesTheRouteClass(t *testing.T) {
	t.Parallel()
	up := h2cUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, "ok")
	})
	classes, err := route.Parse("orders=POST /orders, users=/users")
	if err != nil {
		t.Fatal(err)
	}
	tp := startProxy(t, up, limiter.Config{Mode: limiter.Unbounded}, func(c *Config) { c.Classes = classes })
	requests := []struct{ method, path, class string }{
		{"GET", "/users/7?x=1", "users"},
		{"POST", "/orders", "orders"},
		{"GET", "/orders", route.Other},
	}
	for _, client := range []*http.Client{http.DefaultClient, h2cClient()} {
		for _, rq := range requests {
			req, _ := http.NewRequest(rq.method, "http://"+tp.addr+rq.path, strings.NewReader("{}"))
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	names := classes.Names()
	for i, o := range tp.rec.wait(t, 2*len(requests)) {
		want := requests[i%len(requests)]
		if got := names[o.Class]; !o.Admission || got != want.class {
			t.Errorf("%s %s (request %d): class %q, admission %v; want %q", want.method, want.path, i, got, o.Admission, want.class)
		}
	}
}
