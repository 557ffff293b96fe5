package sidecar

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/loomgate/loomgate/proxy"
)

func noEnv(string) string { return "" }

// cgroupRoot makes a cgroup mount with one file, as a container sees its
// own cgroup.
func cgroupRoot(t *testing.T, file, content string) string {
	t.Helper()
	root := t.TempDir()
	path := filepath.Join(root, file)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

func TestReadMemoryLimit(t *testing.T) {
	for _, tt := range []struct {
		name, file, content string
		want                int64
	}{
		{"v2", "memory.max", "268435456\n", 256 << 20},
		{"v2 unlimited", "memory.max", "max\n", 0},
		{"v1", "memory/memory.limit_in_bytes", "536870912\n", 512 << 20},
		{"v1 unlimited", "memory/memory.limit_in_bytes", "9223372036854771712\n", 0},
		{"garbage", "memory.max", "lots\n", 0},
		{"none", "unrelated", "", 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := ReadMemoryLimit(cgroupRoot(t, tt.file, tt.content), noEnv)
			if got.Bytes != tt.want {
				t.Errorf("ReadMemoryLimit = %+v; want %d bytes", got, tt.want)
			}
		})
	}
}

// TestMemoryBulkheadFromCgroup: with LOOMGATE_MAX_INFLIGHT_BYTES unset, a
// sidecar in a cgroup of 1 MiB bounds what requests reserve at half of
// it, and a request beyond is rejected at once with rejected_memory rather
// than held; an explicit 0 turns the bound off.
func TestMemoryBulkheadFromCgroup(t *testing.T) {
	const limit = 1 << 20
	root := cgroupRoot(t, "memory.max", "1048576\n")
	bound := int64(limit * InflightShare)
	fits := int(bound / proxy.RequestOverheadBytes) // requests without a body

	release := make(chan struct{})
	var arrived sync.WaitGroup
	arrived.Add(fits)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/held" {
			arrived.Done()
			<-release
		}
		io.WriteString(w, "ok")
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	startIn := func(cfg Config) (*Sidecar, string) {
		s, err := New(cfg, Options{Logger: slog.New(slog.DiscardHandler), CgroupRoot: root, Getenv: noEnv})
		if err != nil {
			t.Fatal(err)
		}
		tl, _ := net.Listen("tcp", "127.0.0.1:0")
		al, _ := net.Listen("tcp", "127.0.0.1:0")
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx, tl, al) }()
		t.Cleanup(func() { cancel(); <-done })
		return s, "http://" + tl.Addr().String()
	}

	upstreamURL := "LOOMGATE_UPSTREAM=http://" + ln.Addr().String()
	s, url := startIn(testConfig(t, upstreamURL))
	if got := s.Stats().MaxBytes; got != bound {
		t.Fatalf("memory bulkhead = %d; want half of the cgroup's %d = %d", got, limit, bound)
	}
	if got := s.Config().MaxInFlightBytes; int64(got) != bound {
		t.Errorf("Config().MaxInFlightBytes = %v; want the resolved %d", got, bound)
	}

	var held sync.WaitGroup
	for range fits {
		held.Add(1)
		go func() {
			defer held.Done()
			resp, err := http.Get(url + "/held")
			if err != nil {
				t.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Errorf("held request = %d; want 200", resp.StatusCode)
			}
		}()
	}
	arrived.Wait()
	start := time.Now()
	resp, err := http.Get(url + "/more")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 || resp.Header.Get("Loomgate-Outcome") != "rejected_memory" {
		t.Errorf("request past the bound = %d %q; want 503 rejected_memory", resp.StatusCode, resp.Header.Get("Loomgate-Outcome"))
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("the rejection took %v; want it at once, not held", d)
	}
	if got := s.Stats().Bytes; got > bound {
		t.Errorf("reserved %d bytes; want at most the bound %d", got, bound)
	}
	close(release)
	held.Wait()

	off, _ := startIn(testConfig(t, upstreamURL, "LOOMGATE_MAX_INFLIGHT_BYTES=0"))
	if got := off.Stats().MaxBytes; got != 0 {
		t.Errorf("with LOOMGATE_MAX_INFLIGHT_BYTES=0 the bulkhead = %d; want 0 (off)", got)
	}
}

// TestStartupLogSaysAutoFoundNoLimit: with no memory limit anywhere, auto
// turns the memory bulkhead off, and the log says that this 0 is auto's
// answer, not a choice.
func TestStartupLogSaysAutoFoundNoLimit(t *testing.T) {
	for _, tt := range []struct {
		name, cgroup, want string
	}{
		{"no limit", "max\n", `msg="no memory bulkhead: LOOMGATE_MAX_INFLIGHT_BYTES=auto found no memory limit (neither GOMEMLIMIT nor a cgroup limit); set it to bound the bytes requests in flight hold" LOOMGATE_MAX_INFLIGHT_BYTES=0`},
		{"a limit", "1048576\n", `msg="memory bulkhead from the memory limit; set LOOMGATE_MAX_INFLIGHT_BYTES to choose, 0 for none" LOOMGATE_MAX_INFLIGHT_BYTES=512KiB`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var log strings.Builder
			_, err := New(testConfig(t, "LOOMGATE_UPSTREAM=http://127.0.0.1:1"), Options{
				Logger:     slog.New(slog.NewTextHandler(&log, nil)),
				CgroupRoot: cgroupRoot(t, "memory.max", tt.cgroup),
				Getenv:     noEnv,
			})
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(log.String(), tt.want) {
				t.Errorf("log:\n%s\nwant a line with %s", log.String(), tt.want)
			}
		})
	}
}

// TestAutoBulkheadBelowOneRequestIsOff: a memory limit so small that
// half of it is less than a request without a body reserves gave a
// bulkhead that refused every request. auto then turns the bulkhead off,
// with a warning that says why.
func TestAutoBulkheadBelowOneRequestIsOff(t *testing.T) {
	var log strings.Builder
	s, err := New(testConfig(t, "LOOMGATE_UPSTREAM=http://127.0.0.1:1"), Options{
		Logger:     slog.New(slog.NewTextHandler(&log, nil)),
		CgroupRoot: cgroupRoot(t, "memory.max", strconv.Itoa(2*proxy.RequestOverheadBytes-2)+"\n"),
		Getenv:     noEnv,
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Stats().MaxBytes; got != 0 {
		t.Errorf("the bulkhead = %d; want 0 (off)", got)
	}
	if got := s.Config().MaxInFlightBytes; got != 0 {
		t.Errorf("Config().MaxInFlightBytes = %v; want 0", got)
	}
	if !strings.Contains(log.String(), `level=WARN msg="no memory bulkhead: half the memory limit is less than a request without a body reserves`) {
		t.Errorf("log:\n%s\nwant a warning that the bulkhead is off, and why", log.String())
	}
}

func TestStatusPageURL(t *testing.T) {
	for addr, want := range map[string]string{
		"127.0.0.1:9090": "http://127.0.0.1:9090/",
		"[::]:9090":      "http://127.0.0.1:9090/",
		"0.0.0.0:9090":   "http://127.0.0.1:9090/",
		"10.1.2.3:9090":  "http://10.1.2.3:9090/",
		"[::1]:9090":     "http://[::1]:9090/",
	} {
		a, err := net.ResolveTCPAddr("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := StatusPageURL(a); got != want {
			t.Errorf("StatusPageURL(%s) = %q; want %q", addr, got, want)
		}
	}
}
