package overhead

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/loomgate/loomgate/lab/bench"
)

// startProc starts a process whose output goes to a name-*.log of its own
// in dir, where
// at says. The scenario's processes hold no requests when they are
// stopped, so a second is grace enough.
func startProc(dir, name string, at place, env []string, path string, args ...string) (*bench.Proc, error) {
	logf, err := os.CreateTemp(dir, name+"-*.log")
	if err != nil {
		return nil, err
	}
	// The process holds its own descriptor; this one is not needed.
	defer logf.Close()
	cmd := bench.Command{Name: name, Path: path, Args: args, Env: env, Output: logf, Grace: time.Second}
	if at.group != nil {
		// The process joins the cgroup before its own first instruction,
		// through a shell that moves itself there and then becomes it:
		// Go reads its CPU quota once at start-up.
		cmd.Path = "/bin/sh"
		cmd.Args = append([]string{"-c", `echo $$ > "$0" && exec "$@"`, at.group.procs, path}, args...)
	}
	var p *bench.Proc
	start := func() (err error) {
		p, err = cmd.Start()
		return err
	}
	if at.pinned {
		err = startOn(at.cpu, start)
	} else {
		err = start()
	}
	return p, err
}

// startTries is how many times in all a process that ended before it
// listened is started, each time on a new address.
const startTries = 3

// retried calls start again while the process it starts ends before it
// listens, startTries times in all: the address FreeAddr found free may
// be taken, as the local end of a connection, by another program on the
// machine before the process listens on it, and the process then exits.
func retried(start func() (*bench.Proc, string, error)) (p *bench.Proc, url string, err error) {
	for range startTries {
		if p, url, err = start(); !errors.Is(err, bench.ErrEnded) {
			return p, url, err
		}
	}
	return p, url, err
}

// startServing starts a process told to listen on addr and returns it
// once addr accepts connections, with its base URL.
func startServing(ctx context.Context, dir, addr, name string, at place, env []string, path string, args ...string) (*bench.Proc, string, error) {
	p, err := startProc(dir, name, at, env, path, args...)
	if err != nil {
		return nil, "", err
	}
	if err := p.WaitListening(ctx, addr, 10*time.Second); err != nil {
		p.Stop()
		return nil, "", fmt.Errorf("%s: %w", name, err)
	}
	return p, "http://" + addr, nil
}

// startBare runs `loomgate stub --forward`: fasthttp's HostClient.Do
// behind fasthttp's Server and nothing else, the floor of a proxy built on
// fasthttp.
func startBare(ctx context.Context, dir string, cfg Config, upstream string, at place) (*bench.Proc, string, error) {
	addr, err := bench.FreeAddr()
	if err != nil {
		return nil, "", err
	}
	return startServing(ctx, dir, addr, "bare", at, nil, cfg.Binary, "stub", "--listen", addr, "--forward", upstream)
}

// startLoomgate runs the sidecar in mode, with extra added to its
// environment (GOMAXPROCS, for the comparison of Ps).
func startLoomgate(ctx context.Context, dir string, cfg Config, upstream, mode string, at place, extra []string) (*bench.Proc, string, error) {
	addrs, err := bench.FreeAddrs(2)
	if err != nil {
		return nil, "", err
	}
	addr, admin := addrs[0], addrs[1]
	env := []string{
		"LOOMGATE_LISTEN=" + addr, "LOOMGATE_ADMIN_LISTEN=" + admin,
		"LOOMGATE_UPSTREAM=http://" + upstream, "LOOMGATE_MODE=" + mode,
		"LOOMGATE_LOG_LEVEL=warn",
	}
	if mode == "fixed" {
		env = append(env, fmt.Sprintf("LOOMGATE_WORKERS=%d", cfg.FixedWorkers), fmt.Sprintf("LOOMGATE_QUEUE_SIZE=%d", cfg.Held))
	}
	env = append(env, extra...)
	return startServing(ctx, dir, addr, "loomgate-"+mode, at, env, cfg.Binary, "proxy")
}

// startHAProxy runs HAProxy with what a sidecar needs: HTTP mode, keep-alive
// to the upstream, and in fixed mode maxconn on the server, which queues
// the rest in HAProxy as loomgate's fixed mode does.
func startHAProxy(ctx context.Context, dir, path string, cfg Config, upstream, mode string, at place) (*bench.Proc, string, error) {
	addr, err := bench.FreeAddr()
	if err != nil {
		return nil, "", err
	}
	server := "server s1 " + upstream
	if mode == "fixed" {
		server += fmt.Sprintf(" maxconn %d", cfg.FixedWorkers)
	}
	conf := fmt.Sprintf(`global
  maxconn %d
defaults
  mode http
  timeout connect 5s
  timeout client 60s
  timeout server 60s
  timeout queue 60s
  http-reuse always
frontend f
  bind %s
  default_backend b
backend b
  %s
`, cfg.Held+1000, addr, server)
	file := filepath.Join(dir, "haproxy-"+mode+".cfg")
	if err := os.WriteFile(file, []byte(conf), 0o644); err != nil {
		return nil, "", err
	}
	return startServing(ctx, dir, addr, "haproxy-"+mode, at, nil, path, "-f", file, "-db")
}

// startNginx runs nginx as one process (no master, one worker), so that its
// CPU and memory are one process's, as loomgate's and HAProxy's are, with
// keep-alive to the upstream.
func startNginx(ctx context.Context, dir, path string, cfg Config, upstream string, at place) (*bench.Proc, string, error) {
	addr, err := bench.FreeAddr()
	if err != nil {
		return nil, "", err
	}
	prefix := filepath.Join(dir, "nginx")
	for _, d := range []string{"logs", "tmp"} {
		if err := os.MkdirAll(filepath.Join(prefix, d), 0o755); err != nil {
			return nil, "", err
		}
	}
	conf := fmt.Sprintf(`daemon off;
master_process off;
worker_processes 1;
worker_rlimit_nofile %d;
error_log %s/logs/error.log warn;
pid %s/logs/nginx.pid;
events { worker_connections %d; }
http {
  access_log off;
  client_body_temp_path %s/tmp;
  proxy_temp_path %s/tmp;
  upstream u { server %s; keepalive %d; }
  server {
    listen %s;
    location / {
      proxy_pass http://u;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_read_timeout 60s;
    }
  }
}
`, 3*cfg.Held+1000, prefix, prefix, 2*cfg.Held+1000, prefix, prefix, upstream, cfg.Held, addr)
	file := filepath.Join(prefix, "nginx.conf")
	if err := os.WriteFile(file, []byte(conf), 0o644); err != nil {
		return nil, "", err
	}
	return startServing(ctx, dir, addr, "nginx", at, nil, path, "-p", prefix, "-c", file)
}
