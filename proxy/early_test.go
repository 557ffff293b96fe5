package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/loomgate/loomgate/limiter"
)

// TestEarlyAnswerToAnUploadIsPassedOn: an upstream may answer a request
// before it has read the body (RFC 9112, 9.3: a 401, a 413) and close the
// connection with the rest of the body unread, which resets it under the
// proxy's writing. Its answer came first and is the request's: the client
// gets it, and it counts as the upstream's answer, not its failure.
func TestEarlyAnswerToAnUploadIsPassedOn(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
		io.WriteString(w, "who are you")
	})
	tp := startProxy(t, up.URL, limiter.Config{Mode: limiter.Fixed, Workers: 2}, func(c *Config) { c.Logger = discardLogger() })
	const size = 10 << 20
	c := dial(t, tp.addr)
	fmt.Fprintf(c, "POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", size)
	go func() {
		chunk := strings.Repeat("a", 64<<10)
		for sent := 0; sent < size; sent += len(chunk) {
			if _, err := io.WriteString(c, chunk); err != nil {
				return
			}
		}
	}()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading the answer: %v; want the upstream's 401", err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusUnauthorized || string(body) != "who are you" {
		t.Errorf("answer %d %q; want the upstream's 401 %q", resp.StatusCode, body, "who are you")
	}
	if o := tp.rec.wait(t, 1)[0]; o.Kind != OK || o.Status != http.StatusUnauthorized {
		t.Errorf("outcome %v %d; want ok 401, the upstream's answer", o.Kind, o.Status)
	}
	tp.waitIdle(t)
}
