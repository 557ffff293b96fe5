package sidecar

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestAdminConnectionsAreBounded: the admin port's connections come out of
// the process's descriptors, so they are bounded: of adminConns+8 clients
// that each send a request and keep the connection, adminConns are
// answered and the rest wait until one closes. Unbounded, 21,000 idle
// connections to the admin port took every descriptor, and the traffic
// port answered nothing.
func TestAdminConnectionsAreBounded(t *testing.T) {
	s := start(t, testConfig(t, "LOOMGATE_UPSTREAM="+upstream(t, 0)))
	addr := strings.TrimPrefix(s.AdminURL, "http://")
	answered := make(chan net.Conn, adminConns+8)
	for range adminConns + 8 {
		go func() {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
			io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
			c.SetReadDeadline(time.Now().Add(20 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				return
			}
			resp.Body.Close()
			answered <- c
		}()
	}
	var held []net.Conn
	for len(held) < adminConns {
		select {
		case c := <-answered:
			held = append(held, c)
		case <-time.After(10 * time.Second):
			t.Fatalf("%d admin connections answered; want %d", len(held), adminConns)
		}
	}
	select {
	case <-answered:
		t.Fatalf("more than %d admin connections open at once", adminConns)
	case <-time.After(500 * time.Millisecond):
	}
	// The traffic port is not the admin port's to starve.
	if code := get(t, s.URL+"/"); code != 200 {
		t.Errorf("traffic with the admin port full: %d; want 200", code)
	}
	// One closes: one more is answered.
	held[0].Close()
	select {
	case <-answered:
	case <-time.After(10 * time.Second):
		t.Error("an admin connection closed, and none of those waiting was answered")
	}
}
