package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/loomgate/loomgate/lab/bench"
	"github.com/loomgate/loomgate/lab/stub"
	"github.com/loomgate/loomgate/sidecar"
)

func init() {
	// Scenarios run the stub and the sidecar as processes of their own;
	// see processes. --in-process keeps them in this one.
	scenarioLauncher = processes{}
}

// processes launches, for each run of a scenario, `loomgate stub` and
// `loomgate proxy` as processes of their own, this executable both: each
// one's memory is then its own (the sidecar's process_resident_memory_bytes
// is the sidecar's, not the rig's and the stub's too; the stub's is read
// from /proc for Target.UpstreamRSS), and a run does not inherit the
// previous one's peak. os.Executable finds the binary under `go run` too,
// which builds one in a temporary directory.
type processes struct {
	// exe is the loomgate executable; if empty, this one.
	exe string
}

func (l processes) Launch(ctx context.Context, arm bench.Arm) (bench.Target, func(), error) {
	exe := l.exe
	var err error
	if exe == "" {
		if exe, err = os.Executable(); err != nil {
			return bench.Target{}, nil, fmt.Errorf("cannot find this executable to run the stub and the sidecar: %w", err)
		}
	}
	addrs, err := bench.FreeAddrs(3) // stub, traffic, admin
	if err != nil {
		return bench.Target{}, nil, err
	}
	stubArgs := []string{"stub", "--listen", addrs[0], "--pool", strconv.Itoa(arm.Stub.Pool)}
	if arm.Stub.DBPool > 0 {
		stubArgs = append(stubArgs, "--db-pool", strconv.Itoa(arm.Stub.DBPool))
	}
	st, err := bench.Command{Name: "stub", Path: exe, Args: stubArgs, Grace: launchDrain}.Start()
	if err != nil {
		return bench.Target{}, nil, err
	}
	upstream, stopUpstream, upstreamRSS := "http://"+addrs[0], func() {}, st.RSS
	if arm.Upstream != nil {
		// The upstream may call the stub as it starts (a warm-up), so the
		// stub listens first.
		if err := st.WaitListening(ctx, addrs[0], 10*time.Second); err != nil {
			st.Stop()
			return bench.Target{}, nil, fmt.Errorf("arm %q: %w", arm.Label, err)
		}
		if upstream, stopUpstream, err = arm.Upstream(ctx, upstream); err != nil {
			st.Stop()
			return bench.Target{}, nil, fmt.Errorf("arm %q: %w", arm.Label, err)
		}
		// Not the stub's memory, and the upstream's is its own affair.
		upstreamRSS = nil
	}
	environ := append([]string{
		"LOOMGATE_LISTEN=" + addrs[1],
		"LOOMGATE_ADMIN_LISTEN=" + addrs[2],
		"LOOMGATE_UPSTREAM=" + upstream,
		"LOOMGATE_DRAIN_TIMEOUT=" + launchDrain.String(),
		"LOOMGATE_LOG_LEVEL=warn",
	}, arm.Sidecar.Environ()...)
	if _, err := sidecar.ParseEnv(environ); err != nil {
		stopUpstream()
		st.Stop()
		return bench.Target{}, nil, fmt.Errorf("arm %q: %w", arm.Label, err)
	}
	sc, err := bench.Command{Name: "sidecar", Path: exe, Args: []string{"proxy"}, Env: environ, Grace: launchDrain}.Start()
	if err != nil {
		stopUpstream()
		st.Stop()
		return bench.Target{}, nil, err
	}
	stop := func() {
		sc.Stop()
		stopUpstream()
		st.Stop()
	}
	for i, a := range addrs {
		p := sc
		if i == 0 {
			p = st
		}
		if err := p.WaitListening(ctx, a, 10*time.Second); err != nil {
			stop()
			return bench.Target{}, nil, fmt.Errorf("arm %q: %w", arm.Label, err)
		}
	}
	return bench.Target{URL: "http://" + addrs[1], AdminURL: "http://" + addrs[2], UpstreamURL: "http://" + addrs[0], UpstreamRSS: upstreamRSS}, stop, nil
}

// inProcess launches, for each run of a scenario, a stub and a sidecar in
// this process on loopback, the sidecar configured through the same
// LOOMGATE_* parsing as `loomgate proxy`: `loomgate bench --in-process`.
// One process needs no executable; the price is that memory figures are
// the whole process's.
type inProcess struct{}

// launchDrain bounds how long a finished run's sidecar and stub may take to
// stop; the bench has already stopped sending.
const launchDrain = 10 * time.Second

func (inProcess) Launch(ctx context.Context, arm bench.Arm) (bench.Target, func(), error) {
	st, err := stub.New(arm.Stub)
	if err != nil {
		return bench.Target{}, nil, err
	}
	stubLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return bench.Target{}, nil, err
	}
	go st.Serve(stubLn)
	stopStub := func() {
		sctx, cancel := context.WithTimeout(context.Background(), launchDrain)
		defer cancel()
		st.Shutdown(sctx)
	}

	upstream := "http://" + stubLn.Addr().String()
	if arm.Upstream != nil {
		var stopUpstream func()
		if upstream, stopUpstream, err = arm.Upstream(ctx, upstream); err != nil {
			stopStub()
			return bench.Target{}, nil, fmt.Errorf("arm %q: %w", arm.Label, err)
		}
		stubOnly := stopStub
		stopStub = func() {
			stopUpstream()
			stubOnly()
		}
	}
	environ := append([]string{
		"LOOMGATE_LISTEN=127.0.0.1:0",
		"LOOMGATE_ADMIN_LISTEN=127.0.0.1:0",
		"LOOMGATE_UPSTREAM=" + upstream,
		"LOOMGATE_DRAIN_TIMEOUT=" + launchDrain.String(),
	}, arm.Sidecar.Environ()...)
	cfg, err := sidecar.ParseEnv(environ)
	if err != nil {
		stopStub()
		return bench.Target{}, nil, fmt.Errorf("arm %q: %w", arm.Label, err)
	}
	controller, err := labController(environ)
	if err != nil {
		stopStub()
		return bench.Target{}, nil, fmt.Errorf("arm %q: %w", arm.Label, err)
	}
	s, err := sidecar.New(cfg, sidecar.Options{Logger: slog.New(slog.DiscardHandler), Version: version, Controller: controller})
	if err != nil {
		stopStub()
		return bench.Target{}, nil, fmt.Errorf("arm %q: %w", arm.Label, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		stopStub()
		return bench.Target{}, nil, err
	}
	adminLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		ln.Close()
		stopStub()
		return bench.Target{}, nil, err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		// A sidecar that ends on its own (a listener lost, a drain cut
		// short) leaves the run's figures without their cause: say so.
		if err := s.Run(runCtx, ln, adminLn); err != nil {
			fmt.Fprintf(os.Stderr, "loomgate bench: arm %q: the in-process sidecar stopped: %v\n", arm.Label, err)
		}
	}()
	stop := func() {
		cancel()
		<-done
		stopStub()
	}
	return bench.Target{URL: "http://" + ln.Addr().String(), AdminURL: "http://" + adminLn.Addr().String(), UpstreamURL: "http://" + stubLn.Addr().String()}, stop, nil
}
