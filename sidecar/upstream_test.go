package sidecar

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// lockedBuffer is what a process (or the sidecar's log) writes while the
// test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// logLines are the lines of log whose message starts with msg.
func logLines(log, msg string) []string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, `msg="`+msg) {
			out = append(out, l)
		}
	}
	return out
}

// attr is the value of key in a line of slog's text.
func attr(line, key string) string {
	m := regexp.MustCompile(` ` + key + `=("[^"]*"|\S+)`).FindStringSubmatch(line)
	if m == nil {
		return ""
	}
	return strings.Trim(m[1], `"`)
}

// downUpstream is an HTTP upstream on loopback that can be stopped and
// started again on the same address.
type downUpstream struct {
	t    *testing.T
	addr string
	srv  *http.Server
}

func newDownUpstream(t *testing.T) *downUpstream {
	u := &downUpstream{t: t}
	u.start()
	t.Cleanup(u.stop)
	return u
}

func (u *downUpstream) start() {
	u.t.Helper()
	addr := u.addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	// Another program may take the port for an instant; it is given
	// back.
	var ln net.Listener
	var err error
	for range 50 {
		if ln, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		u.t.Fatalf("listen again on %s: %v", addr, err)
	}
	u.addr = ln.Addr().String()
	u.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })}
	go u.srv.Serve(ln)
}

func (u *downUpstream) stop() { u.srv.Close() }

// getBody is GET url's status and body.
func getBody(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// upstreamDoc is /advice's upstream object.
func upstreamDoc(t *testing.T, admin string) UpstreamDoc {
	t.Helper()
	code, body := getBody(t, admin+"/advice")
	var doc struct {
		Upstream UpstreamDoc `json:"upstream"`
	}
	if err := json.Unmarshal([]byte(body), &doc); code != 200 || err != nil {
		t.Fatalf("GET /advice = %d, %v", code, err)
	}
	return doc.Upstream
}

// TestUpstreamDownAndBack: a real upstream on loopback stops and starts
// again on its address. Its requests get 502 and the log says so once,
// with the error; /readyz fails once connects have been refused for
// LOOMGATE_READY_FOLLOWS_UPSTREAM, not before; /advice (the status page's
// source) shows the spell; and once the upstream listens again /readyz
// passes and the log says the upstream is back, with the count.
func TestUpstreamDownAndBack(t *testing.T) {
	const follow = 2 * time.Second
	up := newDownUpstream(t)
	log := &lockedBuffer{}
	s := startWith(t, testConfig(t, "LOOMGATE_UPSTREAM=http://"+up.addr, "LOOMGATE_READY_FOLLOWS_UPSTREAM="+follow.String()),
		Options{Logger: slog.New(slog.NewTextHandler(log, nil))})
	if code, body := getBody(t, s.AdminURL+"/readyz"); code != 200 {
		t.Fatalf("GET /readyz with the upstream up = %d %q; want 200", code, body)
	}
	if code, _ := getBody(t, s.URL+"/"); code != 200 {
		t.Fatalf("GET / with the upstream up = %d; want 200", code)
	}

	up.stop()
	down := time.Now()
	const n = 5
	for range n {
		if code, _ := getBody(t, s.URL+"/"); code != 502 {
			t.Errorf("GET / with the upstream down = %d; want 502", code)
		}
	}
	warns := logLines(log.String(), "upstream failing")
	if len(warns) != 1 || attr(warns[0], "failed") != "1" || !strings.Contains(attr(warns[0], "err"), "connection refused") ||
		attr(warns[0], "upstream") != "http://"+up.addr {
		t.Errorf("failure lines = %q; want one, failed=1, naming the upstream and connection refused\n%s", warns, log)
	}
	doc := upstreamDoc(t, s.AdminURL)
	if !doc.Failing || doc.Failed != n || doc.FailingSince == nil || !strings.Contains(doc.Error, "connection refused") {
		t.Errorf("/advice's upstream = %+v; want failing, %d failed, connection refused", doc, n)
	}

	// Not ready within follow of the first refusal, and never before.
	var notReady string
	for deadline := time.Now().Add(follow + 20*time.Second); ; {
		code, body := getBody(t, s.AdminURL+"/readyz")
		if code == 503 {
			if since := time.Since(down); since < follow {
				t.Errorf("/readyz failed %v after the upstream went down; want %v at the least", since, follow)
			}
			notReady = body
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz still %d %q %v after the upstream went down", code, body, time.Since(down))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !strings.HasPrefix(notReady, "upstream refusing connections for ") || !strings.Contains(notReady, "connection refused") {
		t.Errorf("/readyz's body = %q; want why, with the error", notReady)
	}
	if doc := upstreamDoc(t, s.AdminURL); doc.NotReady != strings.TrimSuffix(notReady, "\n") || doc.ReadyFollowsSeconds != follow.Seconds() {
		t.Errorf("/advice's upstream = %+v; want not_ready %q, ready_follows_upstream_seconds %v", doc, notReady, follow.Seconds())
	}

	up.start()
	if code, body := getBody(t, s.AdminURL+"/readyz"); code != 200 {
		t.Errorf("GET /readyz with the upstream back = %d %q; want 200", code, body)
	}
	// Only connects failed: the probe's connect ends the spell, though no
	// request came.
	if doc := upstreamDoc(t, s.AdminURL); doc.Failing || doc.NotReady != "" {
		t.Errorf("/advice's upstream once back = %+v; want answering, ready", doc)
	}
	if code, _ := getBody(t, s.URL+"/"); code != 200 {
		t.Errorf("GET / with the upstream back = %d; want 200", code)
	}
	text := log.String()
	back := logLines(text, "upstream accepts connections again")
	if len(back) != 1 || attr(back[0], "failed_total") != strconv.Itoa(n) {
		t.Errorf("recovery lines = %q; want one, failed_total=%d\n%s", back, n, text)
	}
	if l := logLines(text, "not ready: /readyz answers 503"); len(l) != 1 || !strings.Contains(l[0], "level=WARN") {
		t.Errorf("not-ready lines = %q; want one WARN\n%s", l, text)
	}
	if l := logLines(text, "ready: the upstream accepts connections"); len(l) != 1 {
		t.Errorf("ready-again lines = %q; want one\n%s", l, text)
	}
	t.Logf("log:\n%s", text)
}

// TestReadyFollowsOnlyConnects: an upstream that is reached but fails
// every request (here it drops each connection) leaves /readyz at 200
// past LOOMGATE_READY_FOLLOWS_UPSTREAM: the pod leaving the endpoints
// would not help, and when a dependency all pods share is what fails,
// every pod would leave at once. With the variable at 0, a dead upstream
// leaves /readyz at 200 too.
func TestReadyFollowsOnlyConnects(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dropping := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, _, _ := w.(http.Hijacker).Hijack()
		c.Close()
	})}
	go dropping.Serve(ln)
	t.Cleanup(func() { dropping.Close() })
	s := start(t, testConfig(t, "LOOMGATE_UPSTREAM=http://"+ln.Addr().String(), "LOOMGATE_READY_FOLLOWS_UPSTREAM=500ms"))
	for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if code, _ := getBody(t, s.URL+"/"); code != 502 {
			t.Fatalf("GET / through a dropping upstream = %d; want 502", code)
		}
	}
	if code, body := getBody(t, s.AdminURL+"/readyz"); code != 200 {
		t.Errorf("GET /readyz with the upstream reached but failing = %d %q; want 200", code, body)
	}
	if doc := upstreamDoc(t, s.AdminURL); !doc.Failing {
		t.Errorf("/advice's upstream = %+v; want failing", doc)
	}

	gone, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := gone.Addr().String()
	gone.Close()
	off := start(t, testConfig(t, "LOOMGATE_UPSTREAM=http://"+addr, "LOOMGATE_READY_FOLLOWS_UPSTREAM=0s"))
	if code, body := getBody(t, off.AdminURL+"/readyz"); code != 200 {
		t.Errorf("GET /readyz, not following a dead upstream = %d %q; want 200", code, body)
	}
}

// TestNotReadyBeforeTheUpstreamIsReached: a sidecar started before its
// service listens is not ready until the service accepts a connection:
// ready at once, it would take traffic only to answer 502.
func TestNotReadyBeforeTheUpstreamIsReached(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	s := start(t, testConfig(t, "LOOMGATE_UPSTREAM=http://"+addr))
	code, body := getBody(t, s.AdminURL+"/readyz")
	if code != 503 || !strings.HasPrefix(body, "upstream not reached yet: ") || !strings.Contains(body, "connection refused") {
		t.Errorf("GET /readyz before the upstream listens = %d %q; want 503, not reached yet, connection refused", code, body)
	}
}
