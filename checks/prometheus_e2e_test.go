package checks

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/loomgate/loomgate/sidecar/sidecartest"
	"go.yaml.in/yaml/v2"
)

// TestPrometheusAlertFires runs the shipped rules in a real Prometheus that
// scrapes a real sidecar: a fixed pool of 2 in front of a 150 ms service,
// offered 30 closed-loop clients, queues every request for about
// 30 / (2 / 0.15 s) - 0.15 s = 2.1 s, far above LoomgateQueueTimeHigh's
// 250 ms. The alert must go pending and then firing in /api/v1/alerts, the
// alerts this load does not justify must stay silent, every rule must
// evaluate without error, and every expression of the rules and the
// dashboard must run against the scraped data.
func TestPrometheusAlertFires(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Prometheus and loads a sidecar for about 15 s; run without -short")
	}
	promBin := sidecartest.RequireTool(t, "prometheus", "prometheus")
	const (
		workers = 2
		service = 150 * time.Millisecond
		clients = 30
		// alertFor replaces every alert's production `for:` (minutes).
		alertFor = 5 * time.Second
		// Bounds each wait: Prometheus ready, the target scraped, the alert firing.
		startupLimit = 30 * time.Second
		firingLimit  = 90 * time.Second
	)
	const alert = "LoomgateQueueTimeHigh"
	// True under this load too: queue wait is ~93% of each request's time.
	// So is LoomgateFleetSaturated: a workload of one replica, whose
	// request-seconds say it holds 15 times its capacity.
	alsoTrue := []string{"LoomgateQueueShareHigh", "LoomgateFleetSaturated"}
	// Not justified by this load: the target is up under job="loomgate",
	// nothing is rejected (a deep queue, a 30 s queue timeout), and no
	// request has a body. Their `for:` is shortened too, and they must not
	// even go pending, so silence means the expression is false, not merely
	// that minutes have not passed.
	mustStaySilent := []string{"LoomgateSidecarDown", "LoomgateRejecting", "LoomgateInFlightMemoryHigh"}

	upURL, _ := slowUpstream(t, service)
	s := startSidecar(t, map[string]string{
		"LOOMGATE_MODE":          "fixed",
		"LOOMGATE_WORKERS":       strconv.Itoa(workers),
		"LOOMGATE_QUEUE_SIZE":    "1000",
		"LOOMGATE_QUEUE_TIMEOUT": "30s",
		"LOOMGATE_UPSTREAM":      upURL,
	})
	admin := strings.TrimPrefix(s.AdminURL, "http://")
	prom := startPrometheus(t, promBin, admin, alertFor, startupLimit)

	// Load only once the target is scraped and the rules have seen it, so
	// that the timings below measure the rules, not Prometheus' start.
	// Prometheus hands discovered targets to its scrape manager every 5 s,
	// so the first scrape comes about 5 s after the rules start: until then
	// absent(up{job="loomgate"}) is true, and with the shortened `for:`
	// LoomgateSidecarDown can fire for an instant. With the production 5m
	// it only goes pending.
	ready := time.Now()
	prom.waitFor(t, startupLimit, `up{job="loomgate"} == 1`)
	for prom.active(t, "LoomgateSidecarDown") != nil {
		if time.Since(ready) > startupLimit {
			t.Fatalf("LoomgateSidecarDown still %s %v after Prometheus was ready, with the target up", prom.active(t, "LoomgateSidecarDown").State, startupLimit)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("Prometheus ready → target scraped and LoomgateSidecarDown inactive: %.1fs", time.Since(ready).Seconds())

	start := time.Now()
	load := startClosedLoop(t, s.URL+"/work", clients)
	var pendingAfter, firingAfter time.Duration
	var fired promAlert
	reported := map[string]bool{}
	for fired.State != "firing" {
		if time.Since(start) > firingLimit {
			p99, _, _ := prom.query(`loomgate:queue_wait_seconds:p99_rate1m`)
			t.Fatalf("%s not firing %v after load start; alerts %+v; loomgate:queue_wait_seconds:p99_rate1m = %s",
				alert, firingLimit, prom.alerts(t), p99)
		}
		time.Sleep(200 * time.Millisecond)
		for _, a := range prom.alerts(t) {
			name := a.Labels["alertname"]
			switch {
			case name == alert && a.State == "pending" && pendingAfter == 0:
				pendingAfter = time.Since(start)
			case name == alert && a.State == "firing":
				firingAfter = time.Since(start)
				fired = a
			case slices.Contains(mustStaySilent, name) && !reported[name]:
				// Not even pending: each of these expressions is false
				// throughout this load. LoomgateSidecarDown pending here
				// would mean a scrape of the admin listener failed while
				// the traffic listener was saturated.
				reported[name] = true
				t.Errorf("%s %s under load (labels %v, value %s, active since %v); want inactive", name, a.State, a.Labels, a.Value, a.ActiveAt)
			}
		}
	}
	if pendingAfter == 0 {
		pendingAfter = firingAfter // between two polls; cannot happen with a 5 s `for:`
	}
	t.Logf("load start → %s pending %.1fs, firing %.1fs (for: %v, scrape and evaluation every 1s)",
		alert, pendingAfter.Seconds(), firingAfter.Seconds(), alertFor)

	// The alert as Prometheus renders it: labels from the rule and the
	// target, the value above the threshold, annotations expanded.
	if fired.Labels["job"] != "loomgate" || fired.Labels["instance"] != admin || fired.Labels["severity"] != "warning" {
		t.Errorf("%s labels = %v; want job loomgate, instance %s, severity warning", alert, fired.Labels, admin)
	}
	if v, err := strconv.ParseFloat(fired.Value, 64); err != nil || v <= 0.25 {
		t.Errorf("%s value = %q; want a p99 queue wait above 0.25 s", alert, fired.Value)
	}
	for _, name := range []string{"summary", "description", "runbook"} {
		if a := fired.Annotations[name]; a == "" || strings.Contains(a, "error expanding template") {
			t.Errorf("%s annotation %s = %q; want it expanded", alert, name, a)
		}
	}
	if !strings.Contains(fired.Annotations["summary"], admin) {
		t.Errorf("%s summary = %q; want it to name the instance %s (no pod label outside Kubernetes)", alert, fired.Annotations["summary"], admin)
	}

	states := map[string]string{}
	for _, a := range prom.alerts(t) {
		states[a.Labels["alertname"]] = a.State
	}
	t.Logf("alert states when %s fired: %v", alert, states)
	for _, name := range alsoTrue {
		if states[name] != "pending" && states[name] != "firing" {
			t.Errorf("%s = %q when %s fired; want pending or firing: the same load makes it true", name, states[name], alert)
		}
	}
	for _, name := range mustStaySilent {
		if st, ok := states[name]; ok && !reported[name] {
			t.Errorf("%s %s under load; want inactive", name, st)
		}
	}

	ok, failed := load.stop()
	t.Logf("load: %d clients, %d responses 200, %d failed, %.1fs", clients, ok, failed, time.Since(start).Seconds())
	if failed > 0 {
		t.Errorf("%d requests failed under load; want none (QUEUE_SIZE 1000 and QUEUE_TIMEOUT 30s hold every client)", failed)
	}

	// Every rule as Prometheus last evaluated it, after at least one
	// evaluation with data (the alert fired on a recording rule's output).
	rules := prom.rules(t)
	if want := len(readRules(t)); len(rules) != want {
		t.Errorf("Prometheus loaded %d rules; want the %d of rules.yml", len(rules), want)
	}
	for _, r := range rules {
		if r.Health != "ok" {
			t.Errorf("rule %s: health %q, last error %q; want ok", r.Name, r.Health, r.LastError)
		}
	}

	// Every expression of the rules and the dashboard, as an instant query
	// over the last minute of data, the load included.
	exprs := promExpressions(t)
	var empty []string
	for _, e := range exprs {
		_, n, err := prom.query(e)
		if err != nil {
			t.Errorf("query %q: %v", e, err)
			continue
		}
		if n == 0 {
			empty = append(empty, e)
		}
	}
	t.Logf("evaluated %d expressions against Prometheus; %d returned no series:\n  %s",
		len(exprs), len(empty), strings.Join(empty, "\n  "))
}

// promServer is a Prometheus process started by a test.
type promServer struct {
	url    string
	client *http.Client
}

// startPrometheus runs Prometheus on a free loopback port, scraping the
// sidecar admin address target every second with deploy/prometheus's
// configuration and rules, every alert's `for:` set to alertFor. It is
// stopped, and its data removed, when the test ends.
func startPrometheus(t *testing.T, bin, target string, alertFor, limit time.Duration) *promServer {
	t.Helper()
	dir := t.TempDir()
	rulesFile := filepath.Join(dir, "rules.yml")
	if err := os.WriteFile(rulesFile, rulesWithFor(t, alertFor), 0o644); err != nil {
		t.Fatal(err)
	}
	configFile := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(configFile, prometheusConfig(t, target, rulesFile), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := freePort(t)
	out := new(sidecartest.SyncBuffer)
	cmd := exec.Command(bin,
		"--config.file="+configFile,
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr,
	)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start prometheus: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	// Registered after t.TempDir, so it runs first: the process has exited
	// before its storage directory is removed.
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("prometheus output:\n%s", out)
		}
	})

	p := &promServer{url: "http://" + addr, client: &http.Client{Timeout: 5 * time.Second}}
	deadline := time.Now().Add(limit)
	for {
		select {
		case err := <-exited:
			t.Fatalf("prometheus exited before it was ready: %v\n%s", err, out)
		default:
		}
		resp, err := p.client.Get(p.url + "/-/ready")
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus not ready at %s/-/ready within %v (last error %v)\n%s", p.url, limit, err, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// rulesWithFor returns deploy/prometheus/rules.yml with every alert's `for:`
// set to d, and nothing else changed: the production durations (5m, 10m)
// would make the test wait that long. The 1m rate windows stay as they are:
// rate needs only two samples inside its window, so with one scrape a
// second the real expressions have values seconds after the load starts.
func rulesWithFor(t testing.TB, d time.Duration) []byte {
	t.Helper()
	raw, _ := readYAML(t, "deploy/prometheus/rules.yml")[0].raw.(map[any]any)
	groups, _ := raw["groups"].([]any)
	for _, g := range groups {
		group, _ := g.(map[any]any)
		rules, _ := group["rules"].([]any)
		for _, r := range rules {
			if rule, _ := r.(map[any]any); rule["alert"] != nil {
				rule["for"] = d.String()
			}
		}
	}
	data, err := yaml.Marshal(raw)
	if err != nil {
		t.Fatal(err)
	}

	// The copy must differ from the file in `for:` alone.
	var f promRuleFile
	if err := yaml.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	var got []promRule
	for _, g := range f.Groups {
		got = append(got, g.Rules...)
	}
	want := readRules(t)
	for i := range want {
		if want[i].Alert != "" {
			want[i].For = d.String()
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("rules.yml rewritten with for: %v differs in more than for:\n got %+v\nwant %+v", d, got, want)
	}
	return data
}

// prometheusConfig returns deploy/prometheus/prometheus.yml scraping target
// and evaluating rulesFile every second, its job and path unchanged.
func prometheusConfig(t testing.TB, target, rulesFile string) []byte {
	t.Helper()
	cfg, ok := readYAML(t, "deploy/prometheus/prometheus.yml")[0].raw.(map[any]any)
	if !ok {
		t.Fatal("prometheus.yml: not a mapping")
	}
	global, _ := cfg["global"].(map[any]any)
	if global == nil {
		global = map[any]any{}
	}
	global["scrape_interval"], global["scrape_timeout"], global["evaluation_interval"] = "1s", "1s", "1s"
	cfg["global"] = global
	cfg["rule_files"] = []any{rulesFile}
	jobs, _ := cfg["scrape_configs"].([]any)
	if len(jobs) != 1 {
		t.Fatalf("prometheus.yml: %d scrape_configs; want 1", len(jobs))
	}
	job, ok := jobs[0].(map[any]any)
	if !ok {
		t.Fatalf("prometheus.yml: scrape_configs[0] is %T; want a mapping", jobs[0])
	}
	for _, k := range []string{"scrape_interval", "scrape_timeout"} {
		if _, set := job[k]; set {
			job[k] = "1s"
		}
	}
	static := map[any]any{"targets": []any{target}}
	if configs, _ := job["static_configs"].([]any); len(configs) > 0 {
		if first, _ := configs[0].(map[any]any); first["labels"] != nil {
			static["labels"] = first["labels"] // workload, for the fleet rules
		}
	}
	job["static_configs"] = []any{static}
	data, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// api calls a Prometheus HTTP API endpoint and decodes its data into v.
// A response with status "error" is returned as an error with its message.
func (p *promServer) api(method, path string, form url.Values, v any) error {
	var (
		resp *http.Response
		err  error
	)
	if method == http.MethodPost {
		resp, err = p.client.PostForm(p.url+path, form)
	} else {
		resp, err = p.client.Get(p.url + path)
	}
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var body struct {
		Status    string          `json:"status"`
		Data      json.RawMessage `json:"data"`
		ErrorType string          `json:"errorType"`
		Error     string          `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return fmt.Errorf("%s %s: HTTP %d: %v", method, path, resp.StatusCode, err)
	}
	if body.Status != "success" {
		return fmt.Errorf("status %q, HTTP %d, %s: %s", body.Status, resp.StatusCode, body.ErrorType, body.Error)
	}
	if v == nil {
		return nil
	}
	return json.Unmarshal(body.Data, v)
}

// query runs an instant query and returns its result as JSON and the
// number of series in it (1 for a scalar or a string).
func (p *promServer) query(expr string) (result string, n int, err error) {
	var data struct {
		Result json.RawMessage `json:"result"`
	}
	if err := p.api(http.MethodPost, "/api/v1/query", url.Values{"query": {expr}}, &data); err != nil {
		return "", 0, err
	}
	var series []json.RawMessage
	if json.Unmarshal(data.Result, &series) != nil {
		return string(data.Result), 1, nil
	}
	return string(data.Result), len(series), nil
}

// waitFor waits until expr returns at least one series.
func (p *promServer) waitFor(t testing.TB, limit time.Duration, expr string) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		_, n, err := p.query(expr)
		if err == nil && n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s returned no series within %v (error %v)", expr, limit, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// promAlert is an element of /api/v1/alerts.
type promAlert struct {
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	State       string            `json:"state"`
	ActiveAt    time.Time         `json:"activeAt"`
	Value       string            `json:"value"`
}

// active returns the pending or firing alert named name, or nil.
func (p *promServer) active(t testing.TB, name string) *promAlert {
	t.Helper()
	for _, a := range p.alerts(t) {
		if a.Labels["alertname"] == name {
			return &a
		}
	}
	return nil
}

func (p *promServer) alerts(t testing.TB) []promAlert {
	t.Helper()
	var data struct {
		Alerts []promAlert `json:"alerts"`
	}
	if err := p.api(http.MethodGet, "/api/v1/alerts", nil, &data); err != nil {
		t.Fatalf("GET /api/v1/alerts: %v", err)
	}
	return data.Alerts
}

// promRuleState is a rule of /api/v1/rules.
type promRuleState struct {
	Name      string `json:"name"`
	Health    string `json:"health"`
	LastError string `json:"lastError"`
}

func (p *promServer) rules(t testing.TB) []promRuleState {
	t.Helper()
	var data struct {
		Groups []struct {
			Rules []promRuleState `json:"rules"`
		} `json:"groups"`
	}
	if err := p.api(http.MethodGet, "/api/v1/rules", nil, &data); err != nil {
		t.Fatalf("GET /api/v1/rules: %v", err)
	}
	var rules []promRuleState
	for _, g := range data.Groups {
		rules = append(rules, g.Rules...)
	}
	return rules
}

// closedLoop is a fixed number of clients, each sending its next request
// as soon as the previous one is answered.
type closedLoop struct {
	done       chan struct{}
	wg         sync.WaitGroup
	transport  *http.Transport
	ok, failed atomic.Int64
	stopOnce   sync.Once
}

func startClosedLoop(t testing.TB, target string, clients int) *closedLoop {
	l := &closedLoop{done: make(chan struct{}), transport: &http.Transport{MaxIdleConnsPerHost: clients}}
	client := &http.Client{Transport: l.transport, Timeout: 30 * time.Second}
	for range clients {
		l.wg.Go(func() {
			for {
				select {
				case <-l.done:
					return
				default:
				}
				resp, err := client.Get(target)
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				if err != nil || resp.StatusCode != http.StatusOK {
					l.failed.Add(1)
					continue
				}
				l.ok.Add(1)
			}
		})
	}
	t.Cleanup(func() { l.stop() })
	return l
}

// stop lets every client finish its request in progress, then returns the
// counts of 200 responses and of failures.
func (l *closedLoop) stop() (ok, failed int64) {
	l.stopOnce.Do(func() {
		close(l.done)
		l.wg.Wait()
		l.transport.CloseIdleConnections()
	})
	return l.ok.Load(), l.failed.Load()
}
