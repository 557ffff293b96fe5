package checks

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// h2specPackage is the conformance suite for HTTP/2 that the traffic
// listener's h2c (prior knowledge) is held to, at the version CI installs.
const h2specPackage = "github.com/summerwind/h2spec/cmd/h2spec@v2.2.1+incompatible"

// h2specPassing is the least of its 145 cases that must pass: all but
// one, an invalid preface ("INVALID CONNECTION PREFACE"), which the
// listener answers as the HTTP/1.1 request it reads as: it tells HTTP/2
// from HTTP/1.1 by the first bytes, and those are not the preface.
const h2specPassing = 144

// TestH2Spec runs h2spec against a sidecar's traffic listener, in front of
// an upstream that speaks h2c (as an h2c request's upstream must) and
// answers every request, and holds it to h2specPassing.
func TestH2Spec(t *testing.T) {
	bin := h2specBinary(t)
	s := startSidecar(t, map[string]string{"LOOMGATE_UPSTREAM": h2cUpstream(t)})
	u, err := url.Parse(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// -o: each case's timeout; a case that waits for the server to close
	// its connection waits this long.
	out, err := exec.CommandContext(ctx, bin, "-h", u.Hostname(), "-p", u.Port(), "-o", "2").CombinedOutput()
	// h2spec exits 1 when any case fails; the count is what is judged.
	if ctx.Err() != nil {
		t.Fatalf("h2spec ran past 3 minutes:\n%s", out)
	}
	m := regexp.MustCompile(`(\d+) tests, (\d+) passed, (\d+) skipped, (\d+) failed`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("h2spec: %v; no summary in its output:\n%s", err, out)
	}
	total, _ := strconv.Atoi(string(m[1]))
	passed, _ := strconv.Atoi(string(m[2]))
	t.Logf("h2spec: %d of %d passed", passed, total)
	if passed < h2specPassing {
		t.Errorf("h2spec: %d of %d passed; want at least %d. Its failures:\n%s", passed, total, h2specPassing, failures(out))
	}
}

// h2cUpstream is an upstream on loopback that speaks HTTP/2 with prior
// knowledge, and answers once it has read the request's body. The answer
// is longer than 4 bytes: h2spec's case 6.9.2/2 (a window made negative
// mid-response) skips itself on a shorter one, which leaves 140 to pass.
func h2cUpstream(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	srv := &http.Server{Protocols: &protocols, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, "ok, body read\n")
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}

// failures is h2spec's list of failed cases, from its output.
func failures(out []byte) string {
	s := string(out)
	if i := strings.Index(s, "Failures:"); i >= 0 {
		return s[i:]
	}
	return s
}

// h2specBinary finds h2spec on PATH or where go install puts it, or skips
// (fails with REQUIRE_TEST_TOOLS=1) saying how to install it.
func h2specBinary(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("h2spec"); err == nil {
		return p
	}
	dir := os.Getenv("GOBIN")
	if dir == "" {
		if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
			dir = filepath.Join(strings.TrimSpace(string(out)), "bin")
		}
	}
	if p := filepath.Join(dir, "h2spec"); dir != "" {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if os.Getenv("REQUIRE_TEST_TOOLS") == "1" {
		t.Fatalf("h2spec not found and REQUIRE_TEST_TOOLS=1; install it: go install %s", h2specPackage)
	}
	t.Skipf("h2spec not found; install it to run this test: go install %s", h2specPackage)
	return ""
}
