package sidecar

import (
	"net"
	"testing"

	"github.com/valyala/fasthttp"
)

// BenchmarkRequest measures one small GET through a whole sidecar on
// loopback, built as `loomgate proxy` builds it (observation into the
// metrics, the advice's window and, in adaptive mode, the controller),
// in front of a fasthttp upstream that answers at once. Client and upstream
// are fasthttp, which allocates nothing per request once warm, so
// allocs/op is the sidecar's own.
func BenchmarkRequest(b *testing.B) {
	for _, bc := range []struct {
		name string
		env  []string
	}{
		{"unbounded", []string{"LOOMGATE_MODE=unbounded"}},
		{"fixed", []string{"LOOMGATE_MODE=fixed", "LOOMGATE_WORKERS=64"}},
		{"adaptive", []string{"LOOMGATE_MODE=adaptive"}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			up := fastUpstream(b)
			s := start(b, testConfig(b, append(bc.env, "LOOMGATE_UPSTREAM="+up)...))
			client := &fasthttp.HostClient{Addr: s.URL[len("http://"):], MaxConns: 1024}
			b.ReportAllocs()
			b.SetParallelism(8)
			b.ResetTimer()
			start := cpuNow(b)
			b.RunParallel(func(pb *testing.PB) {
				req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
				defer fasthttp.ReleaseRequest(req)
				defer fasthttp.ReleaseResponse(resp)
				req.SetRequestURI("http://bench.local/users/7?x=1")
				for pb.Next() {
					if err := client.Do(req, resp); err != nil || resp.StatusCode() != 200 {
						b.Errorf("Do = %v, status %d; want 200", err, resp.StatusCode())
						return
					}
				}
			})
			b.StopTimer()
			// The process's CPU time per request, client and upstream
			// included: steadier than ns/op on a busy machine.
			if end := cpuNow(b); end > 0 {
				b.ReportMetric(float64(end-start)/float64(b.N), "cpu-ns/op")
			}
		})
	}
}

// fastUpstream is a fasthttp upstream on loopback answering a small body
// at once.
func fastUpstream(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	payload := []byte("hello, world")
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) { ctx.SetBody(payload) }}
	go srv.Serve(ln)
	tb.Cleanup(func() { srv.Shutdown() })
	return "http://" + ln.Addr().String()
}
