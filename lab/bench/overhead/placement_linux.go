package overhead

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// allowedCPUs lists the CPUs this process may run on.
func allowedCPUs() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, err
	}
	var cpus []int
	for i := range len(set) * 64 {
		if set.IsSet(i) {
			cpus = append(cpus, i)
		}
	}
	return cpus, nil
}

// pinSelf confines every thread of this process to cpu, and returns what
// gives them back the mask they had. A thread started later inherits the
// mask of the one that starts it, already confined, and so does a child
// process: the load (wrk) and the upstream run where the rig does.
func pinSelf(cpu int) (restore func(), err error) {
	var old unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		return nil, err
	}
	var set unix.CPUSet
	set.Set(cpu)
	if err := setThreads(os.Getpid(), &set); err != nil {
		_ = setThreads(os.Getpid(), &old)
		return nil, err
	}
	return func() { _ = setThreads(os.Getpid(), &old) }, nil
}

// setThreads sets the affinity of each of pid's threads: the system call
// sets one thread's, and the Go runtime has several.
func setThreads(pid int, set *unix.CPUSet) error {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return err
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		// A thread that ended since the listing needs no mask.
		if err := unix.SchedSetaffinity(tid, set); err != nil && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("affinity of thread %d: %w", tid, err)
		}
	}
	return nil
}

// startOn runs start, which starts a process, from a thread confined to
// cpu: the child inherits that thread's mask at fork, so it counts its
// CPUs (Go's GOMAXPROCS, HAProxy's nbthread) with the placement already in
// force, as it would in a container given one CPU. Moving it after it
// started would leave it sized for CPUs it no longer has. While the
// thread is locked, the runtime starts new threads from a template thread,
// not this one, so none inherits the temporary mask.
func startOn(cpu int, start func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var old unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		return err
	}
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return err
	}
	defer unix.SchedSetaffinity(0, &old)
	return start()
}

// processCPU is pid's CPU time, user and system, all its threads, those
// that ended included, in nanoseconds: the scheduler's own count, read
// through the process's CPU clock. /proc/<pid>/stat gives the same sum in
// ticks of 10 ms, too coarse for a window of a second or two.
func processCPU(pid int) (int64, error) {
	// clock_getcpuclockid(3): the clock of a process is ^pid << 3, with
	// CPUCLOCK_SCHED (2) in the low bits.
	var ts unix.Timespec
	if err := unix.ClockGettime(int32(^pid<<3|2), &ts); err != nil {
		return 0, fmt.Errorf("CPU clock of process %d: %w", pid, err)
	}
	return ts.Nano(), nil
}

// quotaGroup is a cgroup with a CPU quota, for the quota arms.
type quotaGroup struct {
	dir   string // the cgroup's directory
	procs string // the file a process writes its pid to, to join
}

// newQuotaGroup makes a cgroup beside this process's, limited to share of
// one CPU, with cgroup v2's cpu.max or v1's cfs_quota_us, whichever this
// machine mounts. It needs the right to create one (root, or a delegated
// subtree); without, the error says what was tried.
func newQuotaGroup(share float64) (*quotaGroup, error) {
	const period = 100000 // µs, the kernel's default
	quota := int(share * period)
	name := fmt.Sprintf("loomgate-overhead-%d", os.Getpid())
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	var v1, v2 string
	for line := range strings.SplitSeq(strings.TrimSpace(string(self)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			v2 = parts[2]
		case slices.Contains(strings.Split(parts[1], ","), "cpu"):
			v1 = parts[2]
		}
	}
	var tried []string
	if v1 != "" {
		for _, mount := range []string{"/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"} {
			if _, err := os.Stat(filepath.Join(mount, "cpu.cfs_quota_us")); err != nil {
				continue
			}
			dir := filepath.Join(mount, v1, name)
			if err := makeGroup(dir, "cpu.cfs_quota_us", strconv.Itoa(quota)); err != nil {
				tried = append(tried, err.Error())
				break
			}
			return &quotaGroup{dir: dir, procs: filepath.Join(dir, "cgroup.procs")}, nil
		}
	}
	if v2 != "" {
		if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
			dir := filepath.Join("/sys/fs/cgroup", v2, name)
			if err := makeGroup(dir, "cpu.max", fmt.Sprintf("%d %d", quota, period)); err != nil {
				tried = append(tried, err.Error())
			} else {
				return &quotaGroup{dir: dir, procs: filepath.Join(dir, "cgroup.procs")}, nil
			}
		}
	}
	if len(tried) == 0 {
		return nil, errors.New("no cgroup CPU controller mounted")
	}
	return nil, errors.New(strings.Join(tried, "; "))
}

// makeGroup creates the cgroup dir and writes value to its file, removing
// the group again if that fails.
func makeGroup(dir, file, value string) error {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return fmt.Errorf("create cgroup %s: %w", dir, err)
	}
	if err := os.WriteFile(filepath.Join(dir, file), []byte(value), 0o644); err != nil {
		_ = os.Remove(dir)
		return fmt.Errorf("set %s: %w", filepath.Join(dir, file), err)
	}
	return nil
}

// remove deletes the cgroup, once the processes in it have ended.
func (g *quotaGroup) remove() error { return os.Remove(g.dir) }
