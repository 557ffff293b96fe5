package proxy

import (
	"net"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/loomgate/loomgate/limiter"
)

// BenchmarkProxy measures one small GET through the proxy on loopback:
// client, proxy and upstream are all fasthttp, which allocates nothing per
// request once warm, so allocs/op is the proxy's own.
func BenchmarkProxy(b *testing.B) {
	for _, bc := range []struct {
		name string
		lcfg limiter.Config
	}{
		{"unbounded", limiter.Config{Mode: limiter.Unbounded}},
		{"fixed", limiter.Config{Mode: limiter.Fixed, Workers: 64, QueueSize: 1000, QueueTimeout: time.Second}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			upLn, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			payload := []byte("hello, world")
			up := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) { ctx.SetBody(payload) }}
			go up.Serve(upLn)
			defer up.Shutdown()

			lim, err := limiter.New(bc.lcfg)
			if err != nil {
				b.Fatal(err)
			}
			p, err := New(Config{
				Upstream:     "http://" + upLn.Addr().String(),
				Admitter:     lim,
				Observer:     nopObserver{},
				MaxConns:     lim.Stats().Limit,
				ServerTiming: true,
			})
			if err != nil {
				b.Fatal(err)
			}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			go p.Serve(ln)
			defer p.server.Shutdown()

			client := &fasthttp.HostClient{Addr: ln.Addr().String(), MaxConns: 64}
			b.ReportAllocs()
			b.SetParallelism(8)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
				defer fasthttp.ReleaseRequest(req)
				defer fasthttp.ReleaseResponse(resp)
				req.SetRequestURI("http://bench.local/item?id=1")
				for pb.Next() {
					if err := client.Do(req, resp); err != nil || resp.StatusCode() != 200 {
						b.Errorf("Do = %v, status %d", err, resp.StatusCode())
						return
					}
				}
			})
		})
	}
}

type nopObserver struct{}

func (nopObserver) Observe(*Outcome) {}
