package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Command is a process for the rig to start: a stub, a sidecar, a peer
// proxy. Each is a process of its own so that its CPU and resident memory,
// read from /proc, are its own.
type Command struct {
	// Name names the process in errors, e.g. "stub".
	Name string
	// Path and Args are the executable and its arguments.
	Path string
	Args []string
	// Env is added to this process's environment.
	Env []string
	// Output receives the process's standard output and error. If nil,
	// its standard error goes to this process's and its output is
	// discarded.
	Output io.Writer
	// Grace is how long Stop waits after SIGTERM, for the process to
	// drain, before it kills it. If zero, DefaultGrace.
	Grace time.Duration
}

// DefaultGrace is how long a process the rig started may take to drain
// once asked to stop; the rig has already stopped sending.
const DefaultGrace = 10 * time.Second

// Proc is a process the rig started.
type Proc struct {
	name  string
	cmd   *exec.Cmd
	grace time.Duration
	done  chan struct{}
	// ended is cmd.Wait's result, set before done is closed.
	ended error
}

// Start starts the command.
func (c Command) Start() (*Proc, error) {
	cmd := exec.Command(c.Path, c.Args...)
	cmd.Env = append(os.Environ(), c.Env...)
	if c.Output != nil {
		cmd.Stdout, cmd.Stderr = c.Output, c.Output
	} else {
		cmd.Stderr = os.Stderr
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", c.Name, err)
	}
	p := &Proc{name: c.Name, cmd: cmd, grace: c.Grace, done: make(chan struct{})}
	if p.grace <= 0 {
		p.grace = DefaultGrace
	}
	go func() {
		p.ended = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// Pid is the process's id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Stop asks the process to drain (SIGTERM) and kills it if it has not
// ended within its grace period. It returns once the process has been
// reaped, so that its sockets are the kernel's again before the next run.
// Stopping a stopped process, or a nil one, does nothing.
func (p *Proc) Stop() {
	if p == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	timer := time.NewTimer(p.grace)
	defer timer.Stop()
	select {
	case <-p.done:
	case <-timer.C:
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// RSS is the process's resident memory, VmRSS.
func (p *Proc) RSS() (int64, error) {
	b, err := ResidentBytes(p.Pid())
	if err != nil {
		return 0, fmt.Errorf("%s: %w", p.name, err)
	}
	return b, nil
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's times: 100 on
// every Linux platform Go runs on.
const clockTicks = 100

// CPU is the process's user + system time, from /proc/<pid>/stat.
func (p *Proc) CPU() (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.Pid()))
	if err != nil {
		return 0, err
	}
	utime, err1 := strconv.ParseInt(statField(b, 14), 10, 64)
	stime, err2 := strconv.ParseInt(statField(b, 15), 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("%s: /proc stat: %w", p.name, err)
	}
	return time.Duration(utime+stime) * time.Second / clockTicks, nil
}

// statField returns field n (1-based, as proc(5) numbers them) of
// /proc/<pid>/stat; the command's name, field 2, may hold spaces and is in
// parentheses.
func statField(b []byte, n int) string {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return ""
	}
	fields := strings.Fields(string(b[i+1:]))
	if n-3 < 0 || n-3 >= len(fields) {
		return ""
	}
	return fields[n-3]
}

// ResidentBytes is a process's resident memory, VmRSS of /proc/<pid>/status.
func ResidentBytes(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, errors.New("no VmRSS")
}

// FreeAddr is a loopback address nothing listens on at the moment, for a
// process about to be told to listen there.
func FreeAddr() (string, error) {
	addrs, err := FreeAddrs(1)
	if err != nil {
		return "", err
	}
	return addrs[0], nil
}

// FreeAddrs is n distinct loopback addresses nothing listens on at the
// moment. The kernel may hand a port it just released to the very next
// listen, so addresses found one at a time can repeat (a sidecar told to
// serve traffic and its admin on one port refuses to start): all n are
// held open until the last is found.
func FreeAddrs(n int) ([]string, error) {
	addrs := make([]string, n)
	for i := range addrs {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer ln.Close()
		addrs[i] = ln.Addr().String()
	}
	return addrs, nil
}

// ErrEnded is a process that ended before it listened where it was told
// to (see Proc.WaitListening).
var ErrEnded = errors.New("ended before it listened")

// WaitListening returns once something accepts connections on addr, which
// p was told to listen on, or fails after within, or at once if p ends
// first: a process that cannot listen there (the address taken between
// FreeAddr and its own listen, a bad setting) exits, and its exit says
// so where a wait for the full time would not.
func (p *Proc) WaitListening(ctx context.Context, addr string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("nothing listens on %s after %v: %w", addr, within, err)
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s %w on %s (%v)", p.name, ErrEnded, addr, p.ended)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
