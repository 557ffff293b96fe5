package sidecar

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
)

// A request's path is the client's to write, bytes a label may not hold
// included; the route class named from it must not break /metrics, which
// refuses a label that is not UTF-8.
func TestRouteFromABadPathKeepsMetricsReadable(t *testing.T) {
	s := start(t, testConfig(t, "LOOMGATE_UPSTREAM="+upstream(t, 0)))
	for _, path := range []string{"/\xff", "/a\x01b", "/ok"} {
		c, err := net.Dial("tcp", strings.TrimPrefix(s.URL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("GET %q: %v", path, err)
		}
		io.Copy(io.Discard, resp.Body)
		c.Close()
	}
	resp, err := http.Get(s.AdminURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("/metrics = %d after a path that is not UTF-8:\n%.600s", resp.StatusCode, body)
	}
	if !strings.Contains(string(body), `route="GET /ok"`) {
		t.Errorf("/metrics lacks the route GET /ok:\n%.2000s", body)
	}
}
