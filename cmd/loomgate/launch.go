package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"time"

	"github.com/loomgate/loomgate/bench"
	"github.com/loomgate/loomgate/stub"
)

func init() {
	// Scenarios run in this process; see inProcess.
	scenarioLauncher = inProcess{}
}

// inProcess launches, for each run of a scenario, a stub and a sidecar in
// this process on loopback, the sidecar configured through the same
// LOOMGATE_* parsing as `loomgate proxy`. One process keeps the experiment
// reproducible with one command; the price is that memory figures are the
// whole process's.
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

	environ := append([]string{
		"LOOMGATE_LISTEN=127.0.0.1:0",
		"LOOMGATE_ADMIN_LISTEN=127.0.0.1:0",
		"LOOMGATE_UPSTREAM=http://" + stubLn.Addr().String(),
		"LOOMGATE_DRAIN_TIMEOUT=" + launchDrain.String(),
	}, arm.Sidecar.Environ()...)
	cfg, err := parseConfig(environ)
	if err != nil {
		stopStub()
		return bench.Target{}, nil, fmt.Errorf("arm %q: %w", arm.Label, err)
	}
	s, err := newSidecar(cfg, slog.New(slog.DiscardHandler), io.Discard)
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
		s.Run(runCtx, ln, adminLn)
	}()
	stop := func() {
		cancel()
		<-done
		stopStub()
	}
	return bench.Target{URL: "http://" + ln.Addr().String(), AdminURL: "http://" + adminLn.Addr().String()}, stop, nil
}
