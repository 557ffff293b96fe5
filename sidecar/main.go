package sidecar

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime"
	"strings"

	"github.com/loomgate/loomgate/internal/procs"
)

// StatusPageURL is where a browser on this machine finds the status page
// of an admin listener at addr: a wildcard address (":9090") is reached
// on loopback.
func StatusPageURL(addr net.Addr) string {
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return "http://" + addr.String() + "/"
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port) + "/"
}

// lookupEnv is name's value in environ (os.Environ's form) and whether it
// is set; the first one wins, as with os.LookupEnv.
func lookupEnv(environ []string, name string) (string, bool) {
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok && k == name {
			return v, true
		}
	}
	return "", false
}

// Main is `loomgate proxy`: read the configuration from environ, listen,
// serve, and drain when ctx ends. It logs to stderr, writes the access log
// to stdout, and returns the process's exit status: 0 after a complete
// drain, 2 for a bad configuration, 1 for anything else.
func Main(ctx context.Context, environ []string, stdout, stderr io.Writer, version string) int {
	return MainWithController(ctx, environ, stdout, stderr, version, nil)
}

// MainWithController is Main with Options.Controller set: the lab's
// `loomlab proxy` runs the sidecar with a reference controller this way.
func MainWithController(ctx context.Context, environ []string, stdout, stderr io.Writer, version string, controller func(ControllerHooks) Controller) int {
	cfg, err := ParseEnv(environ)
	gomaxprocs, set := lookupEnv(environ, "GOMAXPROCS")
	ps, perr := procs.Read(gomaxprocs, set, runtime.GOMAXPROCS(0))
	if perr != nil {
		// Reported with the LOOMGATE_ variables' problems, so that all
		// are fixed in one round.
		var ee *EnvError
		if errors.As(err, &ee) {
			ee.Problems = append(ee.Problems, perr.Error())
		} else if err == nil {
			err = &EnvError{Problems: []string{perr.Error()}}
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "loomgate: %v\n", err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: cfg.LogLevel}))
	warnUnprefixed(log, environ)
	cpuLimit := procs.ReadCPULimit()
	if one := procs.UnderCPULimit(ps, cpuLimit); one != ps {
		ps = one
		runtime.GOMAXPROCS(one.N)
		go procs.FollowCPULimit(ctx, procs.ReadCPULimit, procs.CPULimitCheck, func(limit float64) {
			runtime.SetDefaultGOMAXPROCS()
			log.Info("CPU limit raised above one CPU: Go's default Ps again", "GOMAXPROCS", runtime.GOMAXPROCS(0), "cpu_limit", limit)
		})
	}
	// What a CPU figure of this process is read against; see procs.Ps.
	log.Info("Go runtime Ps; set GOMAXPROCS to choose", "GOMAXPROCS", ps.N, "from", ps.Source, "cpus", runtime.NumCPU(), "cpu_limit", cpuLimit)
	// A container's limit is the runtime's too, unless GOMEMLIMIT says
	// otherwise: the collector then works harder near the limit instead of
	// letting garbage grow into it and the kernel's OOM killer.
	if n := SetRuntimeMemoryLimit(ReadMemoryLimit("", nil), nil); n > 0 {
		log.Info("Go runtime memory limit from the cgroup; set GOMEMLIMIT to choose", "limit", Size(n).String())
	}
	s, err := build(cfg, Options{Logger: log, AccessLog: stdout, Version: version, Controller: controller})
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
	s.LogConfig(log)
	log.Info("serving", "traffic", ln.Addr().String(), "admin", adminLn.Addr().String(), "upstream", cfg.Upstream, "version", version,
		"status_page", StatusPageURL(adminLn.Addr()))
	// The drain starts with ctx's end; Run logs it when it times out.
	// The line is written before Main returns: the caller may read the
	// log then, and nothing of Main's may write to it after.
	ran, logged := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(logged)
		select {
		case <-ctx.Done():
		case <-ran:
		}
		if ctx.Err() != nil {
			log.Info("draining", "timeout", cfg.DrainTimeout.String())
		}
	}()
	err = s.Run(ctx, ln, adminLn)
	close(ran)
	<-logged
	switch {
	case errors.Is(err, ErrDrainTimeout):
		return 1
	case err != nil:
		log.Error("stopped", "err", err)
		return 1
	}
	log.Info("drained")
	return 0
}
