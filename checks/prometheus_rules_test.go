package checks

import (
	"bytes"
	"cmp"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/loomgate/loomgate/sidecar/sidecartest"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
)

// designMetrics are the series of the README's metrics table that rules and dashboards use, by type. A
// dashboard or rule naming anything else shows nothing, silently.
var designMetrics = map[string]string{
	"loomgate_requests_total":             "counter",
	"loomgate_upstream_responses_total":   "counter",
	"loomgate_queue_wait_seconds":         "histogram",
	"loomgate_service_seconds":            "histogram",
	"loomgate_request_seconds":            "histogram",
	"loomgate_in_flight":                  "gauge",
	"loomgate_queued":                     "gauge",
	"loomgate_limit":                      "gauge",
	"loomgate_queue_limit":                "gauge",
	"loomgate_in_flight_max":              "gauge",
	"loomgate_queued_max":                 "gauge",
	"loomgate_in_flight_bytes":            "gauge",
	"loomgate_in_flight_bytes_max":        "gauge",
	"loomgate_in_flight_seconds_total":    "counter",
	"loomgate_queued_seconds_total":       "counter",
	"loomgate_capacity":                   "gauge",
	"loomgate_dry_run_requests_total":     "counter",
	"loomgate_level_queue_wait_seconds":   "histogram",
	"loomgate_mode_info":                  "gauge",
	"loomgate_build_info":                 "gauge",
	"loomgate_upstream_capacity_estimate": "gauge",
	"loomgate_upstream_saturated":         "gauge",
	"loomgate_advice_workers":             "gauge",
	"loomgate_advice_bulkhead":            "gauge",
	"loomgate_upstream_memory_bytes":      "gauge",
	"loomgate_advice_bytes_per_request":   "gauge",
	// Not loomgate's own: Prometheus' scrape health, and the process
	// collector that the README lists beside loomgate's metrics.
	"up":                            "gauge",
	"process_resident_memory_bytes": "gauge",
}

// designOutcomes are the values of loomgate_requests_total's outcome label.
var designOutcomes = []string{
	"ok", "upstream_error", "upstream_timeout", "rejected_queue_full", "rejected_queue_timeout",
	"rejected_bulkhead", "rejected_memory", "client_closed", "bad_request",
}

// The alerts and recording rules that deploy/README.md and the dashboard
// promise.
var (
	wantAlerts = []string{
		"LoomgateQueueTimeHigh", "LoomgateQueueShareHigh", "LoomgateRejecting", "LoomgateCriticalQueueTimeHigh",
		"LoomgateUpstreamSaturated", "LoomgateInFlightMemoryHigh", "LoomgateSidecarDown",
		"LoomgateFleetSaturated", "LoomgateReplicaSaturatedAlone",
	}
	wantRecordingRules = []string{
		"loomgate:requests:rate1m",
		"loomgate:queue_wait_seconds:p50_rate1m",
		"loomgate:queue_wait_seconds:p99_rate1m",
		"loomgate:level_queue_wait_seconds:p99_rate1m",
		"loomgate:service_seconds:p99_rate1m",
		"loomgate:queue_share:ratio_rate1m",
		"loomgate:saturation:ratio",
		"loomgate:rejections:ratio_rate1m",
		// The fleet: the autoscaling signal and its sums per workload.
		"loomgate:demand:rate1m",
		"loomgate:utilisation:ratio_rate1m",
		"loomgate:workload_demand:sum_rate1m",
		"loomgate:workload_capacity:sum",
		"loomgate:workload_utilisation:ratio_rate1m",
		"loomgate:workload_replicas:count",
		"loomgate:workload_replicas_saturated:count",
		"loomgate:workload_replicas_saturated:ratio",
		"loomgate:workload_replicas_wanted:target70",
		"loomgate:workload_rejections:rate1m",
		"loomgate:workload_rejections:ratio_rate1m",
		"loomgate:workload_queue_wait_seconds:p50_rate1m",
		"loomgate:workload_queue_wait_seconds:p99_rate1m",
	}
)

type promRuleFile struct {
	Groups []struct {
		Name  string     `yaml:"name"`
		Rules []promRule `yaml:"rules"`
	} `yaml:"groups"`
}

type promRule struct {
	Record      string            `yaml:"record"`
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

func readRules(t testing.TB) []promRule {
	t.Helper()
	docs := readYAML(t, "deploy/prometheus/rules.yml")
	if len(docs) != 1 {
		t.Fatalf("deploy/prometheus/rules.yml: %d documents; want 1", len(docs))
	}
	var f promRuleFile
	docs[0].decode(t, &f)
	var rules []promRule
	for _, g := range f.Groups {
		rules = append(rules, g.Rules...)
	}
	if len(rules) == 0 {
		t.Fatalf("deploy/prometheus/rules.yml: no rules")
	}
	return rules
}

// recordingRules returns the names rules.yml records.
func recordingRules(t testing.TB) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	for _, r := range readRules(t) {
		if r.Record != "" {
			names[r.Record] = true
		}
	}
	return names
}

// promExpressions returns every PromQL expression of rules.yml and of the
// dashboard's panels, the dashboard's with Grafana's variables replaced so
// that Prometheus can evaluate them: intervals by 1m, template variables by
// their "All" value.
func promExpressions(t testing.TB) []string {
	t.Helper()
	var out []string
	for _, r := range readRules(t) {
		out = append(out, r.Expr)
	}
	out = append(out, autoscalingQueries(t)...)
	d := readDashboard(t)
	vars := map[string]string{}
	for _, v := range d.Dashboard.Templating.List {
		if v.Type == dashboard.VariableTypeQuery {
			vars[v.Name] = cmp.Or(deref(v.AllValue), ".*")
		}
	}
	for _, p := range dashboardPanels(d.Dashboard) {
		for _, q := range p.Targets {
			if tg := promTarget(q); tg != nil {
				out = append(out, grafanaToPromQL(tg.Expr, vars))
			}
		}
	}
	return out
}

var grafanaIntervals = strings.NewReplacer(
	"${__rate_interval}", "1m", "$__rate_interval", "1m",
	"${__interval}", "1m", "$__interval", "1m",
	"${__range}", "1m", "$__range", "1m",
)

func grafanaToPromQL(expr string, vars map[string]string) string {
	expr = grafanaIntervals.Replace(expr)
	return regexp.MustCompile(`\$\{?(\w+)\}?`).ReplaceAllStringFunc(expr, func(m string) string {
		if v, ok := vars[strings.Trim(m, "${}")]; ok {
			return v
		}
		return m
	})
}

var (
	promStrings  = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'`)
	promMatchers = regexp.MustCompile(`\{[^}]*\}`)
	promRanges   = regexp.MustCompile(`\[[^\]]*\]`)
	promLabelSet = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promNumbers  = regexp.MustCompile(`\b\d+(\.\d+)?([eE][+-]?\d+)?\b`)
	promName     = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
	promOutcome  = regexp.MustCompile(`outcome\s*(=~|=)\s*"([^"]*)"`)
	promKeywords = []string{"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left", "group_right", "inf", "nan", "atan2"}
)

// promMetricNames returns the metric and recording rule names an
// expression selects. It reads PromQL only as far as these files use it:
// label matchers, ranges, label lists and numbers are dropped, and a name
// followed by "(" is a function.
func promMetricNames(expr string) []string {
	s := promStrings.ReplaceAllString(expr, `""`)
	s = promMatchers.ReplaceAllString(s, "{}")
	s = promRanges.ReplaceAllString(s, "[]")
	s = promLabelSet.ReplaceAllString(s, " ")
	s = promNumbers.ReplaceAllString(s, " ")
	var names []string
	for _, loc := range promName.FindAllStringIndex(s, -1) {
		name := s[loc[0]:loc[1]]
		if strings.HasPrefix(strings.TrimLeft(s[loc[1]:], " \t\n"), "(") || slices.Contains(promKeywords, strings.ToLower(name)) {
			continue
		}
		names = append(names, name)
	}
	return names
}

// checkPromExpr reports the names in expr that neither the README's metric
// list nor rules.yml define, and outcome matchers that match no outcome.
func checkPromExpr(expr string, recorded map[string]bool) []string {
	var problems []string
	if m := regexp.MustCompile(`^\s*label_values\((.*),\s*\w+\)\s*$`).FindStringSubmatch(expr); m != nil {
		expr = m[1] // a Grafana variable query: the series, then a label
	}
	names := promMetricNames(expr)
	if len(names) == 0 {
		problems = append(problems, fmt.Sprintf("%q selects no series", expr))
	}
	for _, name := range names {
		if strings.Contains(name, ":") {
			if !recorded[name] {
				problems = append(problems, fmt.Sprintf("uses %s, which rules.yml does not record", name))
			}
			continue
		}
		if typ, ok := designMetrics[name]; ok {
			// A bare histogram name is the native histogram, which a
			// Prometheus scrapes only when told to: allowed only beside
			// the classic buckets as the fallback.
			if typ == "histogram" && !slices.Contains(names, name+"_bucket") {
				problems = append(problems, fmt.Sprintf("uses histogram %s by its bare name (native) without %[1]s_bucket (classic) beside it", name))
			}
			continue
		}
		base := regexp.MustCompile(`_(bucket|sum|count)$`).ReplaceAllString(name, "")
		if designMetrics[base] != "histogram" {
			problems = append(problems, fmt.Sprintf("uses %s, which is not in the README's metrics table", name))
		}
	}
	for _, m := range promOutcome.FindAllStringSubmatch(expr, -1) {
		pattern := m[2]
		if m[1] == "=" {
			pattern = regexp.QuoteMeta(pattern)
		}
		re, err := regexp.Compile("^(?:" + pattern + ")$")
		if err != nil {
			problems = append(problems, fmt.Sprintf("outcome matcher %q: %v", m[0], err))
			continue
		}
		if !slices.ContainsFunc(designOutcomes, re.MatchString) {
			problems = append(problems, fmt.Sprintf("outcome matcher %q matches none of %q", m[0], designOutcomes))
		}
	}
	return problems
}

func TestRulesPromMetricNames(t *testing.T) {
	tests := []struct {
		expr string
		want []string
	}{
		{`sum by (namespace, le) (rate(loomgate_queue_wait_seconds_bucket{outcome=~"a|b"}[1m]))`, []string{"loomgate_queue_wait_seconds_bucket"}},
		{`up{job="loomgate"} == 0 or absent(up{job="loomgate"})`, []string{"up", "up"}},
		{`a:b:c / (x_total > 0) * 128 * 1024`, []string{"a:b:c", "x_total"}},
		{`count by (mode) (loomgate_mode_info == 1)`, []string{"loomgate_mode_info"}},
		{`histogram_quantile(0.99, sum without (pod) (rate(h_bucket[$__rate_interval])))`, []string{"h_bucket"}},
	}
	for _, tt := range tests {
		if got := promMetricNames(tt.expr); !slices.Equal(got, tt.want) {
			t.Errorf("promMetricNames(%q) = %q; want %q", tt.expr, got, tt.want)
		}
	}
	recorded := map[string]bool{"loomgate:x:rate1m": true}
	for _, tt := range []struct {
		expr string
		bad  bool
	}{
		{`loomgate:x:rate1m`, false},
		{`loomgate:y:rate1m`, true},
		{`rate(loomgate_request_seconds_sum[1m])`, false},
		{`loomgate_request_seconds`, true},
		{`histogram_quantile(0.5, sum(rate(loomgate_request_seconds[1m]))) or histogram_quantile(0.5, sum by (le) (rate(loomgate_request_seconds_bucket[1m])))`, false},
		{`loomgate_requests`, true},
		{`loomgate_requests_total{outcome=~"rejected_.*"}`, false},
		{`loomgate_requests_total{outcome="rejected"}`, true},
		{`label_values(loomgate_build_info{job=~"$job"}, namespace)`, false},
	} {
		if got := checkPromExpr(tt.expr, recorded); (len(got) > 0) != tt.bad {
			t.Errorf("checkPromExpr(%q) = %q; want problems: %v", tt.expr, got, tt.bad)
		}
	}
}

// TestRulesContent checks rules.yml without Prometheus: names, labels,
// annotations, and that every series it reads exists.
func TestRulesContent(t *testing.T) {
	rules := readRules(t)
	recorded := recordingRules(t)
	alerts := map[string]promRule{}
	for _, r := range rules {
		what := cmp.Or(r.Record, r.Alert)
		for _, problem := range checkPromExpr(r.Expr, recorded) {
			t.Errorf("%s: %s", what, problem)
		}
		if r.Record != "" {
			if !regexp.MustCompile(`^loomgate:[a-z0-9_]+:[a-z0-9_]+$`).MatchString(r.Record) {
				t.Errorf("recording rule %s; want level:metric:operations, level loomgate", r.Record)
			}
			continue
		}
		alerts[r.Alert] = r
		if d, err := time.ParseDuration(r.For); err != nil || d <= 0 {
			t.Errorf("alert %s for = %q; want a duration, so that one bad scrape does not page", r.Alert, r.For)
		}
		if s := r.Labels["severity"]; s != "warning" && s != "critical" {
			t.Errorf("alert %s severity = %q; want warning or critical", r.Alert, s)
		}
		for _, a := range []string{"summary", "description", "runbook"} {
			if strings.TrimSpace(r.Annotations[a]) == "" {
				t.Errorf("alert %s has no %s annotation", r.Alert, a)
			}
		}
		rb := r.Annotations["runbook"]
		for _, section := range []string{"Meaning:", "Check", "Change:"} {
			if !strings.Contains(rb, section) {
				t.Errorf("alert %s runbook has no %q section; want what it means, what to check, what to change", r.Alert, section)
			}
		}
		if !regexp.MustCompile(`LOOMGATE_(WORKERS|BULKHEAD|MODE|MAX_INFLIGHT_BYTES)|MODE=`).MatchString(rb) {
			t.Errorf("alert %s runbook names no setting to change (LOOMGATE_WORKERS, LOOMGATE_BULKHEAD, the mode)", r.Alert)
		}
	}
	for _, name := range wantAlerts {
		if _, ok := alerts[name]; !ok {
			t.Errorf("rules.yml has no alert %s", name)
		}
	}
	for _, name := range wantRecordingRules {
		if !recorded[name] {
			t.Errorf("rules.yml records no %s", name)
		}
	}
}

// TestRulesUnitTestsCover checks that rules_test.yml shows every alert both
// firing and not firing.
func TestRulesUnitTestsCover(t *testing.T) {
	var f struct {
		Tests []struct {
			Name          string `yaml:"name"`
			AlertRuleTest []struct {
				Alertname string `yaml:"alertname"`
				ExpAlerts []any  `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	readYAML(t, "deploy/prometheus/rules_test.yml")[0].decode(t, &f)
	fires, silent := map[string]bool{}, map[string]bool{}
	for _, tg := range f.Tests {
		for _, a := range tg.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				silent[a.Alertname] = true
			}
		}
	}
	for _, name := range wantAlerts {
		if !fires[name] {
			t.Errorf("rules_test.yml never expects %s to fire", name)
		}
		if !silent[name] {
			t.Errorf("rules_test.yml never expects %s to stay silent", name)
		}
	}
}

// TestRulesJobName checks that the job the rules select is the job both
// scrape configurations produce.
func TestRulesJobName(t *testing.T) {
	var sidecarDown promRule
	for _, r := range readRules(t) {
		if r.Alert == "LoomgateSidecarDown" {
			sidecarDown = r
		}
	}
	m := regexp.MustCompile(`up\{job="([^"]+)"\}`).FindStringSubmatch(sidecarDown.Expr)
	if m == nil {
		t.Fatalf("LoomgateSidecarDown expr %q selects no up{job=...}", sidecarDown.Expr)
	}
	job := m[1]

	var prom struct {
		ScrapeConfigs []struct {
			JobName string `yaml:"job_name"`
		} `yaml:"scrape_configs"`
		RuleFiles []string `yaml:"rule_files"`
	}
	readYAML(t, "deploy/prometheus/prometheus.yml")[0].decode(t, &prom)
	if len(prom.ScrapeConfigs) != 1 || prom.ScrapeConfigs[0].JobName != job {
		t.Errorf("prometheus.yml scrape_configs = %+v; want one job named %q, the job the rules select", prom.ScrapeConfigs, job)
	}
	if !slices.Contains(prom.RuleFiles, "rules.yml") {
		t.Errorf("prometheus.yml rule_files = %q; want rules.yml", prom.RuleFiles)
	}

	pm := only[*monitoringv1.PodMonitor](t, renderKustomization(t, "deploy/kubernetes/base"))
	got := ""
	for _, ep := range pm.Spec.PodMetricsEndpoints {
		for _, r := range ep.RelabelConfigs {
			if r.TargetLabel == "job" && len(r.SourceLabels) == 0 && cmp.Or(r.Action, "replace") == "replace" {
				got = deref(r.Replacement)
			}
		}
	}
	if got != job {
		t.Errorf("PodMonitor sets job to %q; want %q, the job the rules select (the operator's default is <namespace>/<podmonitor>)", got, job)
	}
}

// TestRulesMemoryThreshold checks that LoomgateInFlightMemoryHigh fires
// below the sidecar's memory limit, while there is still time to act.
func TestRulesMemoryThreshold(t *testing.T) {
	var expr string
	for _, r := range readRules(t) {
		if r.Alert == "LoomgateInFlightMemoryHigh" {
			expr = r.Expr
		}
	}
	m := regexp.MustCompile(`>\s*([0-9][0-9 *]*)$`).FindStringSubmatch(strings.TrimSpace(expr))
	if m == nil {
		t.Fatalf("LoomgateInFlightMemoryHigh expr %q; want it to end in > <bytes>, a product of integers", expr)
	}
	threshold := int64(1)
	for _, f := range strings.Split(m[1], "*") {
		n, err := strconv.ParseInt(strings.TrimSpace(f), 10, 64)
		if err != nil {
			t.Fatalf("LoomgateInFlightMemoryHigh threshold %q: %v", m[1], err)
		}
		threshold *= n
	}
	dep := only[*appsv1.Deployment](t, renderKustomization(t, "deploy/kubernetes/base"))
	c, err := loomgateContainer(dep)
	if err != nil {
		t.Fatal(err)
	}
	limit := c.Resources.Limits.Memory()
	if limit.IsZero() {
		t.Fatalf("loomgate container has no memory limit")
	}
	if threshold >= limit.Value() {
		t.Errorf("LoomgateInFlightMemoryHigh threshold %d bytes; want below the sidecar's memory limit %s (%d bytes)", threshold, limit, limit.Value())
	}
}

// runPromtool runs promtool in deploy/prometheus and fails the test with its
// output if it fails.
func runPromtool(t *testing.T, args ...string) string {
	t.Helper()
	promtool := sidecartest.RequireTool(t, "promtool", "prometheus")
	cmd := exec.Command(promtool, args...)
	cmd.Dir = fromRepoRoot("deploy", "prometheus")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func TestRulesPromtoolCheck(t *testing.T) {
	runPromtool(t, "check", "rules", "rules.yml")
}

func TestRulesPromtoolUnitTests(t *testing.T) {
	runPromtool(t, "test", "rules", "rules_test.yml")
}

func TestRulesPrometheusConfig(t *testing.T) {
	runPromtool(t, "check", "config", "prometheus.yml")
}

// TestDashboardExpressionsParse has promtool parse every expression of
// rules.yml and the dashboard, by writing them as recording rules.
func TestDashboardExpressionsParse(t *testing.T) {
	exprs := promExpressions(t)
	var b bytes.Buffer
	b.WriteString("groups:\n  - name: parse\n    rules:\n")
	for i, e := range exprs {
		if strings.Contains(e, "$") {
			t.Errorf("expression %q still has a Grafana variable after substitution", e)
		}
		// strconv.Quote output is a valid YAML double-quoted scalar for
		// these ASCII expressions.
		fmt.Fprintf(&b, "      - record: parse:expr_%d:check\n        expr: %s\n", i, strconv.Quote(e))
	}
	file := filepath.Join(t.TempDir(), "exprs.yml")
	if err := os.WriteFile(file, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	promtool := sidecartest.RequireTool(t, "promtool", "prometheus")
	out, err := exec.Command(promtool, "check", "rules", file).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules on the dashboard's and rules' expressions: %v\n%s\n%s", err, out, b.String())
	}
}
