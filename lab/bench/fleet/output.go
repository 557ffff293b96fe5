package fleet

import (
	"fmt"
	"io"
	"math"
	"strings"
)

// WriteMarkdown writes the run as a table, one row per step, and says when
// an HPA with the examples' target would have added a replica.
func WriteMarkdown(w io.Writer, r Result) error {
	cfg := r.Config
	var b strings.Builder
	fmt.Fprintf(&b, "%d replicas (loomgate fixed, %d workers, in front of a %v service: %.0f rps together) behind HAProxy round robin; "+
		"Prometheus scrapes every second and evaluates deploy/prometheus/rules.yml with rates over %v. "+
		"Utilisation is loomgate:utilisation:ratio_rate1m: mean requests present over capacity.\n\n",
		cfg.Replicas, cfg.Workers, cfg.Delay, r.Capacity, r.Window)
	b.WriteString("| demand | offered rps | served rps | 503/s |")
	for i := range cfg.Replicas {
		fmt.Fprintf(&b, " replica-%d |", i+1)
	}
	fmt.Fprintf(&b, " fleet | saturated | queue p99 | ceil(Σ/%.1f) | HPA sets | alerts |\n|---|---|---|---|", Target)
	b.WriteString(strings.Repeat("---|", cfg.Replicas))
	b.WriteString("---|---|---|---|---|---|\n")
	for _, s := range r.Steps {
		fmt.Fprintf(&b, "| %.0f%% | %.0f | %.0f | %.1f |", 100*s.Demand, s.Offered, s.Served, s.Rejected)
		for _, u := range s.Pods {
			fmt.Fprintf(&b, " %s |", num(u, 2))
		}
		alerts := strings.Join(s.Alerts, ", ")
		if alerts == "" {
			alerts = "none"
		}
		fmt.Fprintf(&b, " %s | %s | %s | %s | %d | %s |\n",
			num(s.Fleet, 2), num(s.Saturated, 0), ms(s.QueueP99), num(s.Wanted, 0), s.HPA, alerts)
	}
	b.WriteString("\n")
	if i := r.ScaleStep(); i >= 0 {
		s := r.Steps[i]
		fmt.Fprintf(&b, "An HPA targeting %.1f per replica would have added replicas at %.0f%% of capacity (%.0f rps): "+
			"fleet utilisation %s, %d replicas asked for instead of %d.\n", Target, 100*s.Demand, s.Offered, num(s.Fleet, 2), s.HPA, cfg.Replicas)
	} else {
		fmt.Fprintf(&b, "An HPA targeting %.1f per replica would not have added a replica.\n", Target)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func num(v float64, prec int) string {
	if math.IsNaN(v) {
		return "–"
	}
	return fmt.Sprintf("%.*f", prec, v)
}

func ms(seconds float64) string {
	if math.IsNaN(seconds) {
		return "–"
	}
	return fmt.Sprintf("%.0f ms", 1000*seconds)
}
