package overhead

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/loomgate/loomgate/lab/bench"
)

// The HTTP/2 comparison (Config.Protocols): loomgate, a bare Go proxy of
// HTTP/2 and HAProxy, each HTTP/2 with prior knowledge on both sides, in
// front of the same stub, CPU per call for h2c GETs and unary gRPC calls.
// The load is the rig's (wrk speaks HTTP/1.1 only): CPUConcurrency users
// whose streams share bench.DefaultConns connections, as HTTP/2 clients
// share few.

// ProtoRows is one protocol's arms: Row's CPU figures at CPUConcurrency
// (CPUPerRequest per call, CPURange, CPURounds, RPS, P99, Lost); the
// rest are zero.
type ProtoRows struct {
	Proto bench.Proto
	Rows  []Row
}

// Names of the HTTP/2 comparison's arms.
const (
	bareH2Name  = "bare Go"
	haproxyName = "HAProxy"
)

// runProtocols measures the HTTP/2 comparison's arms in front of the stub
// at stubAddr, protocol by protocol, the arms in turn round after round
// as the HTTP/1.1 rounds take them.
func runProtocols(ctx context.Context, cfg Config, dir, haproxy, stubAddr string, at place, progress func(string, ...any)) ([]ProtoRows, error) {
	arms := []*arm{
		{name: "loomgate", start: func(string) (*bench.Proc, string, error) {
			return startLoomgate(ctx, dir, cfg, stubAddr, "unbounded", at, nil)
		}},
		{name: bareH2Name, start: func(string) (*bench.Proc, string, error) {
			return startBareH2(ctx, dir, cfg, stubAddr, at)
		}},
	}
	if haproxy != "" {
		arms = append(arms, &arm{name: haproxyName, start: func(string) (*bench.Proc, string, error) {
			return startHAProxyH2(ctx, dir, haproxy, stubAddr, at)
		}})
	}
	defer func() {
		for _, a := range arms {
			a.stop()
		}
	}()
	var out []ProtoRows
	for _, p := range []bench.Proto{bench.H2C, bench.GRPC} {
		// A fresh process of each proxy per protocol: neither's warmth,
		// nor its heap, carries over to the other.
		for _, a := range arms {
			a.stop()
			a.samples = nil
			if err := a.launch(nil, ""); err != nil {
				return out, fmt.Errorf("%s: %w", a.name, err)
			}
		}
		for round := range cfg.Rounds + 1 {
			for i := range arms {
				a := arms[(round+i)%len(arms)]
				s, err := measureProto(ctx, a, p, cfg)
				for again := 0; busy(err) && again < 2; again++ {
					progress("%s %s: %v; again", p, a.name, err)
					s, err = measureProto(ctx, a, p, cfg)
				}
				if busy(err) {
					progress("%s %s: %v; round %d goes without the figure", p, a.name, err, round)
					s, err = sample{}, nil
					if round > 0 {
						a.row.Lost++
					}
				}
				if err != nil {
					return out, fmt.Errorf("%s %s: %w", p, a.name, err)
				}
				if round > 0 {
					a.samples = append(a.samples, s)
				}
				progress("%s %s (round %d%s): %v CPU per call at c%d (%.0f calls/s, p99 %v)", p, a.name, round,
					map[bool]string{true: ", not counted"}[round == 0], s.cpu, cfg.CPUConcurrency, s.rps, s.p99)
			}
		}
		pr := ProtoRows{Proto: p}
		for _, a := range arms {
			pr.Rows = append(pr.Rows, a.result())
		}
		for _, r := range pr.Rows {
			if h := findRow(pr.Rows, haproxyName); h != nil && r.Name != haproxyName {
				progress("%s: %s × HAProxy: %s", p, r.Name, ratioRange(r.CPURounds, h.CPURounds))
			}
		}
		out = append(out, pr)
	}
	return out, nil
}

// measureProto is one round's CPU per call of arm a over protocol p, at
// CPUConcurrency after a warm-up of cpuWarmup.
func measureProto(ctx context.Context, a *arm, p bench.Proto, cfg Config) (sample, error) {
	var s sample
	bc := bench.Config{URL: a.target + "/wait?ms=0", Proto: p, Concurrency: cfg.CPUConcurrency, Window: cpuWarmup, Timeout: 30 * time.Second}
	if _, err := bench.Run(ctx, bc); err != nil {
		return s, err
	}
	before, err := processCPU(a.p.Pid())
	if err != nil {
		return s, err
	}
	bc.Window = cfg.CPUWindow
	r, err := bench.Run(ctx, bc)
	if err != nil {
		return s, err
	}
	after, err := processCPU(a.p.Pid())
	if err != nil {
		return s, err
	}
	if r.Requests == 0 {
		return s, fmt.Errorf("%w at c%d over %s (%d errors)", errNoAnswer, cfg.CPUConcurrency, p, r.Errors.Total())
	}
	s.cpu, s.rps, s.p99 = time.Duration((after-before)/r.Requests), r.RPS, r.P99
	return s, nil
}

func findRow(rows []Row, name string) *Row {
	for i := range rows {
		if rows[i].Name == name {
			return &rows[i]
		}
	}
	return nil
}

// startBareH2 runs `loomgate stub --forward-h2c`: net/http's server and
// httputil.ReverseProxy over HTTP/2 with prior knowledge, and nothing
// else, the floor of a Go proxy of HTTP/2 written as the standard library
// shows.
func startBareH2(ctx context.Context, dir string, cfg Config, upstream string, at place) (*bench.Proc, string, error) {
	addr, err := bench.FreeAddr()
	if err != nil {
		return nil, "", err
	}
	return startServing(ctx, dir, addr, "bare-h2c", at, nil, cfg.Binary, "stub", "--listen", addr, "--forward-h2c", upstream)
}

// startHAProxyH2 runs HAProxy speaking HTTP/2 with prior knowledge on
// both sides (proto h2 on the bind and the server lines), keeping its
// connection to the upstream open.
func startHAProxyH2(ctx context.Context, dir, path, upstream string, at place) (*bench.Proc, string, error) {
	addr, err := bench.FreeAddr()
	if err != nil {
		return nil, "", err
	}
	// Few connections: the streams share them. A maxconn's descriptors
	// (two a connection) must fit the open-file limit, or HAProxy will
	// not start.
	conf := fmt.Sprintf(`global
  maxconn 1000
defaults
  mode http
  timeout connect 5s
  timeout client 60s
  timeout server 60s
  http-reuse always
frontend f
  bind %s proto h2
  default_backend b
backend b
  server s1 %s proto h2
`, addr, upstream)
	file := filepath.Join(dir, "haproxy-h2.cfg")
	if err := os.WriteFile(file, []byte(conf), 0o644); err != nil {
		return nil, "", err
	}
	return startServing(ctx, dir, addr, "haproxy-h2", at, nil, path, "-f", file, "-db")
}

// writeProtocols writes the HTTP/2 comparison's table, a row per protocol
// and arm, and what it measured.
func writeProtocols(b *strings.Builder, res Result, cfg Config) {
	if len(res.Protocols) == 0 {
		return
	}
	fmt.Fprintf(b, "\n### HTTP/2\n\n")
	writeHead(b, []string{"", fmt.Sprintf("CPU per call, c%d", cfg.CPUConcurrency), "× HAProxy", "× bare Go", "calls/s", "p99"})
	closed := func(r *Row) []time.Duration { return r.CPURounds }
	for _, pr := range res.Protocols {
		h, bare := findRow(pr.Rows, haproxyName), findRow(pr.Rows, bareH2Name)
		for _, r := range pr.Rows {
			fmt.Fprintf(b, "| %s, %s | %s | %s | %s | %.0f | %s |\n", pr.Proto, r.Name,
				microsRange(r.CPUPerRequest, r.CPURange), roundsRatio(&r, h, closed), roundsRatio(&r, bare, closed), r.RPS, millis(r.P99))
		}
	}
	fmt.Fprintf(b, "\nHTTP/2 with prior knowledge on both sides of every proxy, in front of the same stub: h2c GETs and unary gRPC calls (the stub's Wait, `ms=0`), "+
		"%d users of the rig whose streams share %d connections; CPU per call as above, the median of %s after one not counted, the arms in turn, a fresh process of each proxy per protocol. "+
		"Bare Go is `loomgate stub --forward-h2c`, net/http's server and httputil.ReverseProxy alone; HAProxy has `proto h2` on its bind and server lines.\n",
		cfg.CPUConcurrency, bench.DefaultConns, plural(cfg.Rounds, "round"))
	var lost []Row
	for _, pr := range res.Protocols {
		for _, r := range pr.Rows {
			r.Name = fmt.Sprintf("%s %s", pr.Proto, r.Name)
			lost = append(lost, r)
		}
	}
	writeLost(b, lost, cfg)
}
