package proxy

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
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
	arms := h2cBenchArms(b, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello, world")
	})
	for _, arm := range arms {
		b.Run(arm.name, func(b *testing.B) {
			addr := arm.start(b)
			client := h2cBenchClient(b)
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

// BenchmarkH2CStream is a gRPC-shaped server stream through the same arms:
// a call whose answer is 64 messages of 1 KiB, each flushed on its own,
// then trailers; 8 at once on one connection. Per call.
func BenchmarkH2CStream(b *testing.B) {
	msg := make([]byte, 1<<10)
	arms := h2cBenchArms(b, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/grpc")
		w.Header().Set("Trailer", "Grpc-Status")
		for range 64 {
			w.Write(msg)
			w.(http.Flusher).Flush()
		}
		w.Header().Set("Grpc-Status", "0")
	})
	for _, arm := range arms {
		b.Run(arm.name, func(b *testing.B) {
			addr := arm.start(b)
			client := h2cBenchClient(b)
			target := "http://" + addr + "/pkg.Service/Watch"
			b.SetParallelism(8)
			b.SetBytes(64 << 10)
			reportCPU(b, func() {
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						req, _ := http.NewRequest("POST", target, strings.NewReader("request"))
						req.Header.Set("Content-Type", "application/grpc")
						resp, err := client.Do(req)
						if err != nil {
							b.Error(err)
							return
						}
						if n, _ := io.Copy(io.Discard, resp.Body); n != 64<<10 {
							b.Errorf("%d bytes; want %d", n, 64<<10)
						}
						resp.Body.Close()
						if resp.Trailer.Get("Grpc-Status") != "0" {
							b.Errorf("trailers %v; want grpc-status 0", resp.Trailer)
						}
					}
				})
			})
		})
	}
}

// h2cBenchClient is an h2c client whose streams share one connection.
func h2cBenchClient(b *testing.B) *http.Client {
	protos := new(http.Protocols)
	protos.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: protos}
	b.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// h2cBenchArms starts an h2c upstream of handler and returns the arms
// that start a proxy in front of it: loomgate and a bare ReverseProxy.
func h2cBenchArms(b *testing.B, handler http.HandlerFunc) []h2cArm {
	protos := new(http.Protocols)
	protos.SetUnencryptedHTTP2(true)
	upLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	upSrv := &http.Server{Protocols: protos, Handler: handler}
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
	return []h2cArm{{"loomgate", loomgate}, {"bare-reverseproxy", bare}}
}

// h2cArm is a proxy a benchmark compares: start runs it and returns its
// address.
type h2cArm struct {
	name  string
	start func(*testing.B) string
}
