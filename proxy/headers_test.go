package proxy

import (
	"bytes"
	"net"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

func TestSetForwarded(t *testing.T) {
	tests := []struct {
		existing []string
		remote   net.Addr
		want     string
	}{
		{nil, &net.TCPAddr{IP: net.ParseIP("10.1.2.3")}, "10.1.2.3"},
		{[]string{"1.1.1.1"}, &net.TCPAddr{IP: net.ParseIP("::1")}, "1.1.1.1, ::1"},
		{[]string{"1.1.1.1", "2.2.2.2"}, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}, "1.1.1.1, 2.2.2.2, 127.0.0.1"},
		{[]string{"1.1.1.1"}, nil, "1.1.1.1"},
	}
	for _, tt := range tests {
		var h fasthttp.RequestHeader
		h.SetHost("svc.example")
		for _, v := range tt.existing {
			h.Add("X-Forwarded-For", v)
		}
		setForwarded(&h, tt.remote, nil)
		if got := string(bytes.Join(h.PeekAll("X-Forwarded-For"), []byte("|"))); got != tt.want {
			t.Errorf("X-Forwarded-For after %q from %v = %q; want %q", tt.existing, tt.remote, got, tt.want)
		}
		if got := string(h.Peek("X-Forwarded-Host")); got != "svc.example" {
			t.Errorf("X-Forwarded-Host = %q; want svc.example", got)
		}
	}
}

func TestSetForwardedDoesNotAllocate(t *testing.T) {
	var h fasthttp.RequestHeader
	h.SetHost("svc")
	remote := &net.TCPAddr{IP: net.ParseIP("192.0.2.1")}
	buf := make([]byte, 0, 64)
	n := testing.AllocsPerRun(100, func() {
		h.Set("X-Forwarded-For", "1.1.1.1")
		buf = setForwarded(&h, remote, buf)
	})
	if n != 0 {
		t.Errorf("setForwarded allocates %v times; want 0", n)
	}
}

func FuzzRemoveHopHeaders(f *testing.F) {
	f.Add("keep-alive, X-Foo", "X-Foo")
	f.Add(",,close ,  x-bar,", "X-Bar")
	f.Add("Upgrade", "Upgrade")
	f.Fuzz(func(t *testing.T, connection, other string) {
		if strings.ContainsAny(connection+other, "\r\n\x00:") || strings.TrimSpace(other) == "" {
			return
		}
		var h fasthttp.RequestHeader
		h.Set("Connection", connection)
		h.Set(other, "v")
		h.Set("Keep-Alive", "timeout=1")
		h.Set("X-Stays", "yes")
		removeHopHeaders(&h, nil)
		if len(h.Peek("Connection")) != 0 || len(h.Peek("Keep-Alive")) != 0 {
			t.Errorf("hop-by-hop headers left: %q", h.String())
		}
		for _, tok := range strings.Split(connection, ",") {
			if tok = strings.TrimSpace(tok); tok != "" && len(h.Peek(tok)) != 0 {
				t.Errorf("header %q named in Connection survived", tok)
			}
		}
		if !strings.EqualFold(strings.TrimSpace(other), "X-Stays") && !strings.Contains(strings.ToLower(connection), "x-stays") && string(h.Peek("X-Stays")) != "yes" {
			t.Errorf("unrelated header removed: %q", h.String())
		}
	})
}
