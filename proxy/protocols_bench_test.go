package proxy

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/loomgate/loomgate/limiter"
)

// reportCPU adds cpu-ns/op: the process's CPU time per request, client and
// upstream included, which the arms compared share.
func reportCPU(b *testing.B, run func()) {
	b.ReportAllocs()
	b.ResetTimer()
	start := cpuNow(b)
	run()
	b.StopTimer()
	if end := cpuNow(b); end > 0 {
		b.ReportMetric(float64(end-start)/float64(b.N), "cpu-ns/op")
	}
}

// BenchmarkNewConnection is one small GET per new connection through the
// proxy: what HTTP/1.1 pays per connection, where the sniffer that tells
// h2c apart does its work.
func BenchmarkNewConnection(b *testing.B) {
	up := newBenchUpstream(b)
	client, _ := benchProxy(b, up, limiter.Config{Mode: limiter.Unbounded})
	reportCPU(b, func() {
		b.RunParallel(func(pb *testing.PB) {
			req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
			defer fasthttp.ReleaseRequest(req)
			defer fasthttp.ReleaseResponse(resp)
			req.SetRequestURI("http://bench.local/item?id=1")
			req.SetConnectionClose()
			for pb.Next() {
				if err := client.Do(req, resp); err != nil || resp.StatusCode() != 200 {
					b.Errorf("Do = %v, status %d", err, resp.StatusCode())
					return
				}
			}
		})
	})
}

// BenchmarkH2C is one small GET over h2c through loomgate, beside a bare
// httputil.ReverseProxy h2c proxy (net/http's server and transport and
// nothing else), in front of the same h2c upstream, with the client's
// streams on one connection as gRPC's are.
func BenchmarkH2C(b *testing.B) {
	protos := new(http.Protocols)
	protos.SetUnencryptedHTTP2(true)
	upLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	upSrv := &http.Server{Protocols: protos, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello, world")
	})}
	go upSrv.Serve(upLn)
	b.Cleanup(func() { upSrv.Close() })
	upURL := "http://" + upLn.Addr().String()

	bare := func(b *testing.B) string {
		target, _ := url.Parse(upURL)
		tr := &http.Transport{Protocols: protos}
		rp := &httputil.ReverseProxy{
			Rewrite:   func(pr *httputil.ProxyRequest) { pr.SetURL(target); pr.SetXForwarded() },
			Transport: tr,
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		srv := &http.Server{Protocols: protos, Handler: rp}
		go srv.Serve(ln)
		b.Cleanup(func() { srv.Close(); tr.CloseIdleConnections() })
		return ln.Addr().String()
	}
	loomgate := func(b *testing.B) string {
		lim, _ := limiter.New(limiter.Config{Mode: limiter.Unbounded})
		p, err := New(Config{
			Upstream: upURL, Policy: lim, Observer: nopObserver{},
			ServerTiming: true, Reserve: RequestBytes,
		})
		if err != nil {
			b.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		go p.Serve(ln)
		b.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			p.Shutdown(ctx)
		})
		return ln.Addr().String()
	}
	for _, arm := range []struct {
		name  string
		start func(*testing.B) string
	}{{"loomgate", loomgate}, {"bare-reverseproxy", bare}} {
		b.Run(arm.name, func(b *testing.B) {
			addr := arm.start(b)
			tr := &http.Transport{Protocols: protos}
			defer tr.CloseIdleConnections()
			client := &http.Client{Transport: tr}
			target := "http://" + addr + "/item?id=1"
			b.SetParallelism(8)
			reportCPU(b, func() {
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						resp, err := client.Get(target)
						if err != nil {
							b.Error(err)
							return
						}
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					}
				})
			})
		})
	}
}
