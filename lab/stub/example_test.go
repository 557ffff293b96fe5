package stub_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"

	"github.com/loomgate/loomgate/lab/stub"
)

func Example() {
	s, err := stub.New(stub.Config{DBPool: 10})
	if err != nil {
		fmt.Println(err)
		return
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	go s.Serve(ln)
	defer s.Shutdown(context.Background())

	for _, path := range []string{"/wait?ms=10", "/cpu?iters=1000", "/wait?ms=soon"} {
		resp, err := http.Get("http://" + ln.Addr().String() + path)
		if err != nil {
			fmt.Println(err)
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Printf("%d %s", resp.StatusCode, body)
	}
	// Output:
	// 200 waited 10 ms
	// 200 cpu iters=1000 result=18101620269801894591
	// 400 bad ms "soon": not a whole number; want a whole number of milliseconds from 0 to 600000
}

func ExampleNew() {
	_, err := stub.New(stub.Config{Pool: -1})
	fmt.Println(err)
	// Output:
	// stub: invalid config: Pool -1: want 0 (no pool) or more
}
