package stub

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"time"
)

// NewH2CForwarder is the bare HTTP/2 proxy the overhead scenario compares
// loomgate's HTTP/2 path with: net/http's server and httputil.ReverseProxy,
// speaking HTTP/2 with prior knowledge (h2c, gRPC) on both sides, with no
// limit and no measurement. It is what a Go proxy of HTTP/2 costs when it
// is written the way the standard library shows.
func NewH2CForwarder(addr string) (*http.Server, error) {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return nil, fmt.Errorf("%w: forward %q: want host:port", ErrConfig, addr)
	}
	target := &url.URL{Scheme: "http", Host: addr}
	// HTTP/2 alone, on cleartext, both ways: the server takes prior
	// knowledge, the transport speaks it to http:// upstreams.
	var h2c http.Protocols
	h2c.SetUnencryptedHTTP2(true)
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Host = r.In.Host
		},
		Transport: &http.Transport{Protocols: &h2c, IdleConnTimeout: 90 * time.Second},
		// A gRPC answer is a stream of messages: each goes out as it
		// comes, not when a buffer fills.
		FlushInterval: -1,
	}
	return &http.Server{Handler: proxy, Protocols: &h2c, ReadHeaderTimeout: 10 * time.Second}, nil
}
