package stub

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
)

// TestH2CForwarderRelaysHTTP2: the bare HTTP/2 proxy takes h2c, asks the
// stub over h2c, and brings its answer back; a host:port it cannot read
// is refused before it serves.
func TestH2CForwarderRelaysHTTP2(t *testing.T) {
	_, upstream := start(t, Config{})
	srv, err := NewH2CForwarder(strings.TrimPrefix(upstream, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	var h2c http.Protocols
	h2c.SetUnencryptedHTTP2(true)
	client := &http.Client{Transport: &http.Transport{Protocols: &h2c}}
	resp, err := client.Get("http://" + ln.Addr().String() + "/wait?ms=1")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.ProtoMajor != 2 || string(body) != "waited 1 ms\n" {
		t.Errorf("through the h2c forwarder: %d over %s, %q; want 200 over HTTP/2 and the stub's answer", resp.StatusCode, resp.Proto, body)
	}

	if _, err := NewH2CForwarder("http://127.0.0.1:1"); err == nil || !strings.Contains(err.Error(), "want host:port") {
		t.Errorf("a URL for host:port: %v; want an error saying host:port", err)
	}
}
