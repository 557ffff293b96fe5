package proxy_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"

	"github.com/loomgate/loomgate/limiter"
	"github.com/loomgate/loomgate/proxy"
)

type printer struct{ done chan struct{} }

func (p printer) Observe(o *proxy.Outcome) {
	fmt.Println(o.Kind, o.Status, o.UpstreamStatus, o.Admitted)
	close(p.done)
}

func Example() {
	service := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello from the service")
	}))
	defer service.Close()

	lim, _ := limiter.New(limiter.Config{Mode: limiter.Fixed, Workers: 10})
	obs := printer{done: make(chan struct{})}
	p, err := proxy.New(proxy.Config{Upstream: service.URL, Policy: lim, Observer: obs, MaxConns: 10})
	if err != nil {
		panic(err)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	go p.Serve(ln)

	resp, err := http.Get("http://" + ln.Addr().String() + "/")
	if err != nil {
		panic(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	<-obs.done
	fmt.Println(string(body))
	// Output:
	// ok 200 200 true
	// hello from the service
}

func ExampleRequestBytes() {
	// What three requests reserve from a memory bulkhead: a GET, a 1 MiB
	// upload and a chunked upload of unknown length.
	for _, contentLength := range []int{0, 1 << 20, -1} {
		fmt.Printf("%d KiB\n", proxy.RequestBytes(contentLength)>>10)
	}
	// Output:
	// 96 KiB
	// 1120 KiB
	// 160 KiB
}
