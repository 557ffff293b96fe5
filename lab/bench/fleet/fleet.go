// Package fleet is the rig's fleet scenario: what an autoscaler sees of a
// workload as demand rises past what its replicas serve. It runs N
// replicas, each a `loomgate stub` behind a `loomgate proxy` in fixed mode
// (processes of their own, this binary), behind HAProxy balancing round
// robin, and a real Prometheus that scrapes every sidecar once a second
// and evaluates deploy/prometheus/rules.yml. Open-loop load steps through
// fractions of the fleet's capacity; at the end of each step the scenario
// reads the rules' per-replica and per-workload figures from Prometheus:
// the utilisation an autoscaler acts on, and the replicas an HPA with the
// example's target (0.7, deploy/kubernetes/autoscaling) would ask for.
//
// The rules are the shipped ones with two changes, so that a step of a few
// seconds has figures of its own: every [1m] range becomes a little less
// than a step, and every alert's `for:` a few seconds.
package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/loomgate/loomgate/lab/bench"
)

// Target is the per-replica utilisation the autoscaling examples aim at
// (deploy/kubernetes/autoscaling), and Tolerance the HPA's default: it
// changes the replica count only when the ratio of the metric to the
// target is outside 1 ± Tolerance.
// MinReplicas and MaxReplicas are the examples' bounds.
const (
	Target    = 0.7
	Tolerance = 0.1

	MinReplicas = 2
	MaxReplicas = 20
)

// Config describes a run of the fleet scenario. Zero fields take the
// defaults given.
type Config struct {
	// Binary is the loomgate executable that runs the stubs and the
	// sidecars. Required.
	Binary string
	// HAProxy and Prometheus are the tools' paths. If empty, they are
	// looked up in PATH (Debian packages haproxy and prometheus).
	HAProxy, Prometheus string
	// Rules is deploy/prometheus/rules.yml. Required.
	Rules string

	// Replicas is how many sidecar and stub pairs run. If zero, 3.
	Replicas int
	// Workers is each sidecar's fixed limit, its capacity. If zero, 10.
	Workers int
	// Delay is the stub's service time. If zero, 100 ms: with 10 workers
	// a replica serves 100 requests a second.
	Delay time.Duration
	// Steps are the demand steps, as fractions of what the replicas
	// serve together. If nil, 0.3, 0.6, 0.8, 1.0, 1.3.
	Steps []float64
	// Step is how long each step lasts. If zero, 12 s.
	Step time.Duration

	// Progress receives a line per step. If nil, nothing.
	Progress io.Writer
}

func (c Config) withDefaults() Config {
	if c.Replicas == 0 {
		c.Replicas = 3
	}
	if c.Workers == 0 {
		c.Workers = 10
	}
	if c.Delay == 0 {
		c.Delay = 100 * time.Millisecond
	}
	if c.Steps == nil {
		c.Steps = []float64{0.3, 0.6, 0.8, 1.0, 1.3}
	}
	if c.Step == 0 {
		c.Step = 12 * time.Second
	}
	return c
}

// Result is a run of the fleet scenario.
type Result struct {
	Config Config
	// Capacity is what the replicas serve together, requests per second:
	// Replicas × Workers / Delay.
	Capacity float64
	// Window is the rate range the rules were evaluated with.
	Window time.Duration
	Steps  []Step
}

// Step is one step of demand, as Prometheus saw it at the step's end.
type Step struct {
	// Demand is the step's fraction of Capacity, Offered its rate.
	Demand, Offered float64
	// Served is the 2xx answers per second the load received, Rejected
	// the 503s.
	Served, Rejected float64
	// Pods is loomgate:utilisation:ratio_rate1m of each replica, in
	// order; NaN where Prometheus had none.
	Pods []float64
	// Fleet is loomgate:workload_utilisation:ratio_rate1m.
	Fleet float64
	// Saturated is loomgate:workload_replicas_saturated:count.
	Saturated float64
	// QueueP99 is loomgate:workload_queue_wait_seconds:p99_rate1m, in
	// seconds: across every replica's requests.
	QueueP99 float64
	// Wanted is loomgate:workload_replicas_wanted:target70: ceil(sum of
	// utilisation / Target).
	Wanted float64
	// HPA is what an HPA with Target would set the replicas to: Wanted
	// within MinReplicas and MaxReplicas, unless the ratio to the target
	// is within Tolerance, when it keeps Replicas.
	HPA int
	// Alerts are the fleet alerts firing or pending.
	Alerts []string
}

// ScaleStep is the index of the first step at which the HPA would add a
// replica, or -1.
func (r Result) ScaleStep() int {
	return slices.IndexFunc(r.Steps, func(s Step) bool { return s.HPA > r.Config.Replicas })
}

// Run runs the fleet scenario.
func Run(ctx context.Context, cfg Config) (Result, error) {
	cfg = cfg.withDefaults()
	res := Result{Config: cfg, Capacity: float64(cfg.Replicas*cfg.Workers) / cfg.Delay.Seconds()}
	if cfg.Binary == "" || cfg.Rules == "" {
		return res, fmt.Errorf("%w: the fleet scenario needs the loomgate binary and deploy/prometheus/rules.yml", bench.ErrConfig)
	}
	if cfg.Step < 4*time.Second {
		return res, fmt.Errorf("%w: Step %v: want at least 4s, for a rate over a few scrapes", bench.ErrConfig, cfg.Step)
	}
	var err error
	for _, tool := range []struct {
		path *string
		name string
	}{{&cfg.HAProxy, "haproxy"}, {&cfg.Prometheus, "prometheus"}} {
		if *tool.path == "" {
			if *tool.path, err = exec.LookPath(tool.name); err != nil {
				return res, fmt.Errorf("the fleet scenario runs %s: apt-get install %s (%w)", tool.name, tool.name, err)
			}
		}
	}
	progress := func(format string, a ...any) {
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, "fleet: "+format+"\n", a...)
		}
	}
	dir, err := os.MkdirTemp("", "loomgate-fleet-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)

	var procs []*bench.Proc
	defer func() {
		// Front first, so that nothing new reaches a stopping sidecar.
		for _, p := range slices.Backward(procs) {
			p.Stop()
		}
	}()
	start := func(name string, env []string, addr string, path string, args ...string) error {
		logf, err := os.Create(filepath.Join(dir, name+".log"))
		if err != nil {
			return err
		}
		defer logf.Close()
		p, err := bench.Command{Name: name, Path: path, Args: args, Env: env, Output: logf, Grace: 2 * time.Second}.Start()
		if err != nil {
			return err
		}
		procs = append(procs, p)
		if err := p.WaitListening(ctx, addr, 15*time.Second); err != nil {
			log, _ := os.ReadFile(logf.Name())
			return fmt.Errorf("%s: %w\n%s", name, err, log)
		}
		return nil
	}

	// The replicas: a stub and its sidecar each.
	traffic := make([]string, cfg.Replicas)
	admin := make([]string, cfg.Replicas)
	for i := range cfg.Replicas {
		addrs, err := bench.FreeAddrs(3)
		if err != nil {
			return res, err
		}
		if err := start(fmt.Sprintf("stub-%d", i+1), nil, addrs[0], cfg.Binary, "stub", "--listen", addrs[0]); err != nil {
			return res, err
		}
		traffic[i], admin[i] = addrs[1], addrs[2]
		env := []string{
			"LOOMGATE_LISTEN=" + addrs[1], "LOOMGATE_ADMIN_LISTEN=" + addrs[2],
			"LOOMGATE_UPSTREAM=http://" + addrs[0],
			"LOOMGATE_MODE=fixed", "LOOMGATE_WORKERS=" + strconv.Itoa(cfg.Workers),
			// A queue as deep as the pool, waits of at most half a second:
			// past capacity the replica queues a little, then rejects.
			"LOOMGATE_QUEUE_SIZE=" + strconv.Itoa(cfg.Workers), "LOOMGATE_QUEUE_TIMEOUT=500ms",
			"LOOMGATE_LOG_LEVEL=warn", "LOOMGATE_DRAIN_TIMEOUT=2s",
		}
		if err := start(fmt.Sprintf("sidecar-%d", i+1), env, addrs[1], cfg.Binary, "proxy"); err != nil {
			return res, err
		}
		if err := procs[len(procs)-1].WaitListening(ctx, addrs[2], 10*time.Second); err != nil {
			return res, err
		}
	}

	// The front: HAProxy, round robin over the sidecars.
	front, err := bench.FreeAddr()
	if err != nil {
		return res, err
	}
	haCfg := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(haCfg, []byte(haproxyConfig(front, traffic)), 0o644); err != nil {
		return res, err
	}
	if err := start("haproxy", nil, front, cfg.HAProxy, "-f", haCfg, "-db"); err != nil {
		return res, err
	}

	// Prometheus: every sidecar a target of job loomgate, workload fleet.
	res.Window = (cfg.Step - 2*time.Second - cfg.Step/6).Truncate(time.Second)
	rules, err := os.ReadFile(cfg.Rules)
	if err != nil {
		return res, err
	}
	rulesFile := filepath.Join(dir, "rules.yml")
	if err := os.WriteFile(rulesFile, shortenRules(rules, res.Window), 0o644); err != nil {
		return res, err
	}
	promCfg := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(promCfg, []byte(prometheusConfig(rulesFile, admin)), 0o644); err != nil {
		return res, err
	}
	promAddr, err := bench.FreeAddr()
	if err != nil {
		return res, err
	}
	if err := start("prometheus", nil, promAddr, cfg.Prometheus,
		"--config.file="+promCfg, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+promAddr, "--enable-feature=native-histograms",
	); err != nil {
		return res, err
	}
	prom := &promClient{base: "http://" + promAddr, client: &http.Client{Timeout: 5 * time.Second}}
	if err := prom.waitReady(ctx, 30*time.Second, len(admin)); err != nil {
		return res, err
	}
	progress("%d replicas of %d workers at %v, %.0f rps together, behind HAProxy; Prometheus scraping every second, rates over %v",
		cfg.Replicas, cfg.Workers, cfg.Delay, res.Capacity, res.Window)

	url := fmt.Sprintf("http://%s/wait?ms=%d", front, cfg.Delay.Milliseconds())
	for i, d := range cfg.Steps {
		st, err := runStep(ctx, cfg, prom, url, d*res.Capacity)
		st.Demand = d
		res.Steps = append(res.Steps, st)
		if err != nil {
			return res, fmt.Errorf("step %d (%.0f%%): %w", i+1, 100*d, err)
		}
		progress("step %d/%d: %.0f rps offered, fleet utilisation %.2f, an HPA would set %d replicas",
			i+1, len(cfg.Steps), st.Offered, st.Fleet, st.HPA)
	}
	return res, nil
}

// runStep offers rate for cfg.Step and reads the rules at its end, while
// the load still runs.
func runStep(ctx context.Context, cfg Config, prom *promClient, url string, rate float64) (Step, error) {
	st := Step{Offered: rate}
	var (
		wg   sync.WaitGroup
		open bench.OpenResult
		oerr error
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		open, oerr = bench.RunOpen(ctx, bench.OpenConfig{URL: url, Rate: rate, Window: cfg.Step, Timeout: 2 * time.Second})
	}()
	// Read just before the window closes: the last rule evaluation covers
	// the step's load and none of the next.
	select {
	case <-time.After(cfg.Step - 700*time.Millisecond):
	case <-ctx.Done():
	}
	rerr := readStep(prom, cfg, &st)
	wg.Wait()
	if w := open.Window.Seconds(); w > 0 {
		st.Served = open.Throughput
		st.Rejected = float64(open.Counts.Unavailable) / w
	}
	return st, errors.Join(oerr, rerr)
}

// readStep fills st from the rules' latest values.
func readStep(prom *promClient, cfg Config, st *Step) error {
	pods, err := prom.query(`loomgate:utilisation:ratio_rate1m{workload="fleet"}`)
	if err != nil {
		return err
	}
	st.Pods = make([]float64, cfg.Replicas)
	for i := range st.Pods {
		st.Pods[i] = math.NaN()
	}
	for _, s := range pods {
		if n, err := strconv.Atoi(strings.TrimPrefix(s.labels["pod"], "replica-")); err == nil && n >= 1 && n <= cfg.Replicas {
			st.Pods[n-1] = s.value
		}
	}
	one := func(q string) float64 {
		v, err2 := prom.query(q + `{workload="fleet"}`)
		if err2 != nil {
			err = errors.Join(err, err2)
		}
		if len(v) != 1 {
			return math.NaN()
		}
		return v[0].value
	}
	st.Fleet = one("loomgate:workload_utilisation:ratio_rate1m")
	st.Saturated = one("loomgate:workload_replicas_saturated:count")
	st.QueueP99 = one("loomgate:workload_queue_wait_seconds:p99_rate1m")
	st.Wanted = one("loomgate:workload_replicas_wanted:target70")
	st.HPA = hpaReplicas(cfg.Replicas, st.Pods)
	alerts, aerr := prom.query(`ALERTS{alertname=~"LoomgateFleetSaturated|LoomgateReplicaSaturatedAlone"}`)
	for _, a := range alerts {
		st.Alerts = append(st.Alerts, a.labels["alertname"]+" "+a.labels["alertstate"])
	}
	slices.Sort(st.Alerts)
	st.Alerts = slices.Compact(st.Alerts)
	return errors.Join(err, aerr)
}

// hpaReplicas is what the HPA's algorithm does with a Pods metric of
// AverageValue Target: the ratio of the pods' mean to the target, no
// change within Tolerance of 1, otherwise ceil(current × ratio), which is
// ceil(sum / Target), within MinReplicas and MaxReplicas. Pods without a
// value are left out, as the HPA leaves out pods whose metric is missing
// when it scales up.
func hpaReplicas(current int, pods []float64) int {
	var sum float64
	n := 0
	for _, u := range pods {
		if !math.IsNaN(u) {
			sum += u
			n++
		}
	}
	if n == 0 {
		return current
	}
	ratio := sum / float64(n) / Target
	if math.Abs(ratio-1) <= Tolerance {
		return current
	}
	return min(max(int(math.Ceil(float64(n)*ratio)), MinReplicas), MaxReplicas)
}

// haproxyConfig balances round robin over the sidecars' traffic ports,
// keeping connections to them open; HAProxy queues nothing itself.
func haproxyConfig(bind string, servers []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `global
  maxconn 4000
defaults
  mode http
  timeout connect 5s
  timeout client 30s
  timeout server 30s
  http-reuse always
frontend f
  bind %s
  default_backend replicas
backend replicas
  balance roundrobin
`, bind)
	for i, s := range servers {
		fmt.Fprintf(&b, "  server replica-%d %s\n", i+1, s)
	}
	return b.String()
}

// prometheusConfig scrapes each sidecar's admin address every second as
// job loomgate, labelled as a replica (pod replica-N) of workload fleet,
// and evaluates the rules every second.
func prometheusConfig(rules string, admin []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files:
  - %q
scrape_configs:
  - job_name: loomgate
    static_configs:
`, rules)
	for i, a := range admin {
		fmt.Fprintf(&b, "      - targets: [%q]\n        labels: {namespace: lab, workload: fleet, pod: replica-%d}\n", a, i+1)
	}
	return b.String()
}

var (
	rangeMinute = regexp.MustCompile(`\[1m\]`)
	alertFor    = regexp.MustCompile(`(?m)^(\s+for:\s*)\S+`)
)

// shortenRules returns the rules with every [1m] range replaced by window
// and every alert's for: by 3s.
func shortenRules(rules []byte, window time.Duration) []byte {
	r := rangeMinute.ReplaceAll(rules, []byte("["+strconv.Itoa(int(window.Seconds()))+"s]"))
	return alertFor.ReplaceAll(r, []byte("${1}3s"))
}

// promClient reads instant vectors from Prometheus' HTTP API.
type promClient struct {
	base   string
	client *http.Client
}

type sample struct {
	labels map[string]string
	value  float64
}

func (p *promClient) query(q string) ([]sample, error) {
	resp, err := p.client.Get(p.base + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var body struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, fmt.Errorf("prometheus query %q: %w", q, err)
	}
	if body.Status != "success" {
		return nil, fmt.Errorf("prometheus query %q: %s", q, body.Error)
	}
	var out []sample
	for _, r := range body.Data.Result {
		s, _ := r.Value[1].(string)
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, fmt.Errorf("prometheus query %q: value %v", q, r.Value[1])
		}
		out = append(out, sample{labels: r.Metric, value: v})
	}
	return out, nil
}

// waitReady returns once Prometheus scrapes all n targets.
func (p *promClient) waitReady(ctx context.Context, within time.Duration, n int) error {
	deadline := time.Now().Add(within)
	for {
		up, err := p.query(`up{job="loomgate"} == 1`)
		if err == nil && len(up) == n {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("prometheus did not scrape the %d sidecars within %v (last: %d up, %v)", n, within, len(up), err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
