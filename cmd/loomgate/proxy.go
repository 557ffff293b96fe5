package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"

	"github.com/loomgate/loomgate/sidecar"
)

// runProxy is `loomgate proxy`: parse, listen, serve, drain on ctx's end.
func runProxy(ctx context.Context, environ []string, stdout, stderr io.Writer) int {
	cfg, err := sidecar.ParseEnviron(environ)
	if err != nil {
		fmt.Fprintf(stderr, "loomgate: %v\n", err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: cfg.LogLevel}))
	// A container's limit is the runtime's too, unless GOMEMLIMIT says
	// otherwise: the collector then works harder near the limit instead of
	// letting garbage grow into it and the kernel's OOM killer.
	if n := sidecar.SetRuntimeMemoryLimit(sidecar.ReadMemoryLimit("", nil), nil); n > 0 {
		log.Info("Go runtime memory limit from the cgroup; set GOMEMLIMIT to choose", "limit", sidecar.Size(n).String())
	}
	s, err := newSidecar(cfg, log, stdout)
	if err != nil {
		log.Error("cannot start", "err", err)
		return 1
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		log.Error("cannot listen for traffic; change LOOMGATE_LISTEN", "LOOMGATE_LISTEN", cfg.Listen, "err", err)
		return 1
	}
	adminLn, err := net.Listen("tcp", cfg.AdminListen)
	if err != nil {
		ln.Close()
		log.Error("cannot listen for admin; change LOOMGATE_ADMIN_LISTEN", "LOOMGATE_ADMIN_LISTEN", cfg.AdminListen, "err", err)
		return 1
	}
	// What is in force: auto resolved.
	logConfig(log, s.Config())
	log.Info("serving", "traffic", ln.Addr().String(), "admin", adminLn.Addr().String(), "upstream", cfg.Upstream, "version", version)
	// The drain starts with ctx's end; Run logs it when it times out.
	go func() {
		<-ctx.Done()
		log.Info("draining", "timeout", cfg.DrainTimeout.String())
	}()
	switch err := s.Run(ctx, ln, adminLn); {
	case errors.Is(err, sidecar.ErrDrainTimeout):
		return 1
	case err != nil:
		log.Error("stopped", "err", err)
		return 1
	}
	log.Info("drained")
	return 0
}

// newSidecar builds the sidecar of cfg, logging to log and writing access
// log lines, when enabled, to accessLog.
func newSidecar(cfg sidecar.Config, log *slog.Logger, accessLog io.Writer) (*sidecar.Sidecar, error) {
	return sidecar.New(cfg, sidecar.Options{Logger: log, AccessLog: accessLog, Version: version})
}

// logConfig writes the effective configuration, defaults included, so that
// an operator reading the log knows what is in force without reading the
// deployment; the other mode's settings follow on a line of their own,
// marked inactive, so that what a flip of LOOMGATE_MODE would bring is in
// the log too.
func logConfig(log *slog.Logger, cfg sidecar.Config) {
	var active, inactive []any
	for _, v := range configVars() {
		if v.Mode != "" && v.Mode != cfg.Mode.String() {
			inactive = append(inactive, v.Name, cfg.Value(v))
			continue
		}
		active = append(active, v.Name, cfg.Value(v))
	}
	log.Info("configuration", active...)
	log.Info("inactive in LOOMGATE_MODE="+cfg.Mode.String()+"; in force after a flip of the mode", inactive...)
}
