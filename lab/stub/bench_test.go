package stub

import (
	"testing"

	"github.com/valyala/fasthttp"
)

// BenchmarkWait0 is the stub's own cost per request: routing, parameters,
// counters and the response body, with no sleep.
func BenchmarkWait0(b *testing.B) {
	s, err := New(Config{})
	if err != nil {
		b.Fatal(err)
	}
	var ctx fasthttp.RequestCtx
	b.ReportAllocs()
	for b.Loop() {
		ctx.Request.SetRequestURI("/wait?ms=0")
		ctx.Response.Reset()
		s.handle(&ctx)
		if ctx.Response.StatusCode() != fasthttp.StatusOK {
			b.Fatalf("status %d: %s", ctx.Response.StatusCode(), ctx.Response.Body())
		}
	}
}

// BenchmarkWait0Pooled adds the hidden pool's FIFO permit.
func BenchmarkWait0Pooled(b *testing.B) {
	s, err := New(Config{Pool: 50})
	if err != nil {
		b.Fatal(err)
	}
	var ctx fasthttp.RequestCtx
	b.ReportAllocs()
	for b.Loop() {
		ctx.Request.SetRequestURI("/wait?ms=0")
		ctx.Response.Reset()
		s.handle(&ctx)
	}
}

// BenchmarkCPU measures one round of /cpu's work, to size iters for a
// wanted cost per request.
func BenchmarkCPU(b *testing.B) {
	b.ReportAllocs()
	var sink uint64
	for b.Loop() {
		sink += cpuWork(1000)
	}
	_ = sink
}
