package procs

import (
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

func TestRead(t *testing.T) {
	for _, tt := range []struct {
		env  string
		n    int
		want Ps
	}{
		// Unset: whatever the runtime chose, from the CPUs and the limit.
		{"", 2, Ps{N: 2, Source: "Go's default"}},
		{"", 32, Ps{N: 32, Source: "Go's default"}},
		// Set: the runtime applied it; the variable is the source.
		{"1", 1, Ps{N: 1, Source: "GOMAXPROCS"}},
		{"4", 4, Ps{N: 4, Source: "GOMAXPROCS"}},
		{"+3", 3, Ps{N: 3, Source: "GOMAXPROCS"}},
	} {
		got, err := Read(tt.env, tt.env != "", tt.n)
		if err != nil || got != tt.want {
			t.Errorf("Read(%q, %d) = %+v, %v; want %+v", tt.env, tt.n, got, err, tt.want)
		}
	}
	// Each of these the runtime ignores for its default.
	for _, env := range []string{"0", "-1", "two", "2.5", " 2", "2 ", "4294967296", ""} {
		if _, err := Read(env, true, 2); err == nil || !strings.Contains(err.Error(), "GOMAXPROCS=") {
			t.Errorf("Read(%q, 2) = %v; want an error naming GOMAXPROCS", env, err)
		}
	}
}

func TestUnderCPULimit(t *testing.T) {
	def := func(n int) Ps { return Ps{N: n, Source: "Go's default"} }
	one := Ps{N: 1, Source: procsSource}
	for _, tt := range []struct {
		p     Ps
		limit float64
		want  Ps
	}{
		{def(2), 0.5, one}, // Go's 2 under half a CPU
		{def(2), 1, one},   // and under one
		{def(2), 1.5, def(2)},
		{def(2), 0, def(2)}, // no limit: every CPU
		{def(8), 0, def(8)},
		{def(1), 0.5, def(1)},
		{Ps{N: 2, Source: "GOMAXPROCS"}, 0.5, Ps{N: 2, Source: "GOMAXPROCS"}}, // the operator's
	} {
		if got := UnderCPULimit(tt.p, tt.limit); got != tt.want {
			t.Errorf("UnderCPULimit(%+v, %v) = %+v; want %+v", tt.p, tt.limit, got, tt.want)
		}
	}
}

func TestCPULimit(t *testing.T) {
	write := func(t *testing.T, files map[string]string) string {
		root := t.TempDir()
		for name, body := range files {
			p := filepath.Join(root, name)
			os.MkdirAll(filepath.Dir(p), 0o755)
			if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return root
	}
	const (
		v2Own = "0::/\n"
		v2Pod = "0::/kubepods/pod1/c1\n"
		v1Pod = "4:memory:/kubepods/pod1/c1\n3:cpu,cpuacct:/kubepods/pod1/c1\n0::/\n"
	)
	for _, tt := range []struct {
		name  string
		self  string
		files map[string]string
		want  float64
	}{
		{"v2, own namespace, half", v2Own, map[string]string{"cgroup.controllers": "cpu", "cpu.max": "50000 100000\n"}, 0.5},
		{"v2, two CPUs", v2Own, map[string]string{"cgroup.controllers": "cpu", "cpu.max": "200000 100000\n"}, 2},
		{"v2, none", v2Own, map[string]string{"cgroup.controllers": "cpu", "cpu.max": "max 100000\n"}, 0},
		{"v2, garbled", v2Own, map[string]string{"cgroup.controllers": "cpu", "cpu.max": "fifty\n"}, 0},
		{"v2, the container's own cgroup", v2Pod, map[string]string{
			"cgroup.controllers":       "cpu",
			"kubepods/pod1/c1/cpu.max": "50000 100000\n",
			"kubepods/pod1/cpu.max":    "150000 100000\n",
			"kubepods/cpu.max":         "max 100000\n",
		}, 0.5},
		{"v2, a pod's limit above the container's none", v2Pod, map[string]string{
			"cgroup.controllers":       "cpu",
			"kubepods/pod1/c1/cpu.max": "max 100000\n",
			"kubepods/pod1/cpu.max":    "80000 100000\n",
		}, 0.8},
		{"v1, half", v1Pod, map[string]string{
			"cpu,cpuacct/kubepods/pod1/c1/cpu.cfs_quota_us":  "50000\n",
			"cpu,cpuacct/kubepods/pod1/c1/cpu.cfs_period_us": "100000\n",
		}, 0.5},
		{"v1, none", v1Pod, map[string]string{
			"cpu,cpuacct/kubepods/pod1/c1/cpu.cfs_quota_us":  "-1\n",
			"cpu,cpuacct/kubepods/pod1/c1/cpu.cfs_period_us": "100000\n",
		}, 0},
		{"v1, the container's cgroup mounted as the root", v1Pod, map[string]string{
			"cpu/cpu.cfs_quota_us":  "25000\n",
			"cpu/cpu.cfs_period_us": "100000\n",
		}, 0.25},
		{"no cgroup", v2Own, nil, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := cpuLimit(write(t, tt.files), tt.self); got != tt.want {
				t.Errorf("cpuLimit = %v; want %v", got, tt.want)
			}
		})
	}
}

// A sidecar on one P by its limit gives the Ps back to Go once the limit
// is raised in place above one CPU, and not before.
func TestFollowCPULimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var tenths atomic.Int64 // the limit in tenths of a CPU
		tenths.Store(5)
		var restored []float64
		done := make(chan struct{})
		go func() {
			FollowCPULimit(t.Context(), func() float64 { return float64(tenths.Load()) / 10 }, time.Second, func(l float64) { restored = append(restored, l) })
			close(done)
		}()
		time.Sleep(30 * time.Second)
		synctest.Wait()
		if len(restored) != 0 {
			t.Fatalf("restored at a limit of half a CPU: %v", restored)
		}
		tenths.Store(20)
		time.Sleep(time.Second)
		<-done
		if len(restored) != 1 || restored[0] != 2 {
			t.Fatalf("restored %v; want once, at 2 CPUs", restored)
		}
	})
}
