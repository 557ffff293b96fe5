package proxy

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestNothingAdded: loomgate adds no Content-Type to a request, and no
// Date to a response, that the other side did not send; an upstream's own
// Date goes through as it was sent.
func TestNothingAdded(t *testing.T) {
	const upstreamDate = "Mon, 02 Jan 2006 15:04:05 GMT"
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Got-Content-Type", strings.Join(r.Header.Values("Content-Type"), "|"))
		if r.URL.Path == "/dated" {
			w.Header().Set("Date", upstreamDate)
		} else {
			w.Header()["Date"] = nil // net/http's default: the service sends none
		}
		io.WriteString(w, "ok")
	})
	tp := startProxy(t, up.URL, unbounded, nil)
	c := dial(t, tp.addr)
	resp, _ := c.roundTrip(t, "POST /undated HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc")
	if got := resp.Header.Get("X-Got-Content-Type"); got != "" {
		t.Errorf("upstream got Content-Type %q for a body sent without one; want none", got)
	}
	if got, ok := resp.Header["Date"]; ok {
		t.Errorf("client got Date %q the upstream never sent; want none", got)
	}
	resp, _ = c.roundTrip(t, "POST /dated HTTP/1.1\r\nHost: x\r\nContent-Type: text/csv\r\nContent-Length: 3\r\n\r\nabc")
	if got := resp.Header.Get("X-Got-Content-Type"); got != "text/csv" {
		t.Errorf("upstream got Content-Type %q; want the client's text/csv", got)
	}
	if got := resp.Header.Values("Date"); len(got) != 1 || got[0] != upstreamDate {
		t.Errorf("client got Date %q; want the upstream's %q alone", got, upstreamDate)
	}
}

// TestHostAndAbsoluteForm: Host goes to the upstream byte for byte. An
// absolute-form target is forwarded in origin form, with the target's
// authority as Host (RFC 9112, 3.2.2: a server ignores the Host header
// then); userinfo in it is an error (RFC 9110, 4.2.4).
func TestHostAndAbsoluteForm(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Got", r.RequestURI+" host="+r.Host+" xfh="+r.Header.Get("X-Forwarded-Host")+" auth="+r.Header.Get("Authorization"))
		io.WriteString(w, "ok")
	})
	tp := startProxy(t, up.URL, unbounded, func(c *Config) { c.Logger = discardLogger() })
	for _, tt := range []struct {
		name, raw string
		status    int
		want      string
	}{
		{"mixed-case Host", "GET /x HTTP/1.1\r\nHost: Example.TEST\r\n\r\n", 200, "/x host=Example.TEST xfh=Example.TEST auth="},
		{"absolute-form", "GET http://Other.Host:81/abs/../a?q=1 HTTP/1.1\r\nHost: x\r\n\r\n", 200, "/abs/../a?q=1 host=Other.Host:81 xfh=Other.Host:81 auth="},
		{"absolute-form, no path", "GET http://other?q HTTP/1.1\r\nHost: x\r\n\r\n", 200, "/?q host=other xfh=other auth="},
		{"absolute-form with userinfo", "GET http://user:pw@other/abs HTTP/1.1\r\nHost: x\r\n\r\n", 400, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp, _ := dial(t, tp.addr).roundTrip(t, tt.raw)
			if resp.StatusCode != tt.status || resp.Header.Get("X-Got") != tt.want {
				t.Errorf("%d, upstream got %q; want %d and %q", resp.StatusCode, resp.Header.Get("X-Got"), tt.status, tt.want)
			}
		})
	}
}
