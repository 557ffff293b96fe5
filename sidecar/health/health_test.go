package health

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/loomgate/loomgate/proxy"
)

// refused is the error of a connect nothing listened to.
var refused = &proxy.ConnectError{Err: &net.OpError{Op: "dial", Net: "tcp4", Err: &os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}}}

// lines are the JSON log lines of buf whose message starts with msg.
func lines(t *testing.T, buf *bytes.Buffer, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(buf.Bytes()))
	for sc.Scan() {
		var l map[string]any
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("log line %q: %v", sc.Text(), err)
		}
		if m, _ := l["msg"].(string); strings.HasPrefix(m, msg) {
			out = append(out, l)
		}
	}
	return out
}

func newLogged(buf *bytes.Buffer) *Health {
	return New(slog.New(slog.NewJSONHandler(buf, nil)), "http://127.0.0.1:1", 0)
}

// TestFailuresAreLoggedOncePer10s: an upstream that is down fails every
// request; the log gets a line at the first failure and then at most one
// per 10 s, with the count since the last line and the error, and a line
// when the upstream answers again with the whole count.
func TestFailuresAreLoggedOncePer10s(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf bytes.Buffer
		h := newLogged(&buf)
		// 1000 failures 25 ms apart: 0 s to 24.975 s.
		for range 1000 {
			h.Observe(&proxy.Outcome{Kind: proxy.UpstreamError, Status: 502, Admitted: true, UpstreamErr: refused, End: time.Now()})
			// Neither an answer nor a failure of the upstream's.
			h.Observe(&proxy.Outcome{Kind: proxy.RejectedQueueFull, Status: 503, End: time.Now()})
			time.Sleep(25 * time.Millisecond)
		}
		if st := h.State(); st.Failed != 1000 || st.FailingSince.IsZero() || !strings.Contains(st.Err, "connection refused") {
			t.Errorf("state during the spell = %+v; want 1000 failed, connection refused", st)
		}
		h.Observe(&proxy.Outcome{Kind: proxy.OK, Status: 200, UpstreamStatus: 200, Admitted: true, End: time.Now()})

		var failed []float64
		for _, l := range lines(t, &buf, "upstream failing") {
			failed = append(failed, l["failed"].(float64))
			if l["level"] != "WARN" || l["err"] != "dial tcp4: connect: connection refused" {
				t.Errorf("line %v; want a WARN naming the error", l)
			}
		}
		// At 0 s, 10 s and 20 s: the first failure, then those of (0, 10]
		// and (10, 20].
		if len(failed) != 3 || failed[0] != 1 || failed[1] != 400 || failed[2] != 400 {
			t.Errorf("failure lines' counts = %v; want 1, 400, 400\n%s", failed, buf.String())
		}
		back := lines(t, &buf, "upstream answers again")
		if len(back) != 1 || back[0]["failed_total"] != 1000.0 || back[0]["failing_for"] != "25s" {
			t.Errorf("recovery lines = %v; want one, failed_total 1000, failing_for 25s\n%s", back, buf.String())
		}
		if st := h.State(); st.Failed != 0 || !st.FailingSince.IsZero() {
			t.Errorf("state once answered = %+v; want no spell", st)
		}
	})
}

// TestFlappingUpstreamIsLoggedOncePer10s: an upstream that fails every
// other request opens and ends a spell each time; the lines stay at two
// per 10 s, and no failure goes uncounted.
func TestFlappingUpstreamIsLoggedOncePer10s(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf bytes.Buffer
		h := newLogged(&buf)
		reset := io.ErrUnexpectedEOF // reached, then dropped
		for range 250 {
			h.Observe(&proxy.Outcome{Kind: proxy.UpstreamError, Status: 502, Admitted: true, UpstreamErr: reset, End: time.Now()})
			h.Observe(&proxy.Outcome{Kind: proxy.OK, Status: 200, UpstreamStatus: 200, Admitted: true, End: time.Now()})
			time.Sleep(100 * time.Millisecond)
		}
		var failed []float64
		for _, l := range lines(t, &buf, "upstream failing") {
			failed = append(failed, l["failed"].(float64))
		}
		backs := lines(t, &buf, "upstream answers again")
		if len(failed) != 3 || failed[0] != 1 || failed[1] != 100 || failed[2] != 100 || len(backs) != 3 {
			t.Errorf("failure lines' counts = %v and %d recovery lines; want 1, 100, 100 and 3\n%s", failed, len(backs), buf.String())
		}
	})
}

// TestAnswerCostsNoAllocation: every request's outcome passes through
// Observe; an answer, once the upstream was reached, allocates nothing.
func TestAnswerCostsNoAllocation(t *testing.T) {
	h := New(slog.New(slog.DiscardHandler), "http://127.0.0.1:1", 0)
	o := &proxy.Outcome{Kind: proxy.OK, Status: 200, UpstreamStatus: 200, Admitted: true, End: time.Now()}
	h.Observe(o) // the first answer: reached
	if n := testing.AllocsPerRun(1000, func() { h.Observe(o) }); n != 0 {
		t.Errorf("Observe(answer) allocates %v times; want 0", n)
	}
}
