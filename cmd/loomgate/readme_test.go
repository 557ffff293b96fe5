package main

import (
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// The README is the user's reference; these tests keep its tables true.

func readme(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(fromRepoRoot("README.md"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestReadmeConfigurationTable(t *testing.T) {
	row := regexp.MustCompile("(?m)^\\| `(LOOMGATE_[A-Z_]+)` \\| (`([^`]*)`|empty) \\|")
	documented := map[string]string{}
	for _, m := range row.FindAllStringSubmatch(readme(t), -1) {
		documented[m[1]] = m[3]
	}
	for _, v := range configVars() {
		def, ok := documented[v.Name]
		if !ok {
			t.Errorf("README's configuration table lacks %s", v.Name)
			continue
		}
		if def != v.Default {
			t.Errorf("README says %s defaults to %q; the binary's default is %q", v.Name, def, v.Default)
		}
		delete(documented, v.Name)
	}
	for name := range documented {
		t.Errorf("README documents %s, which the binary does not read", name)
	}
}

func TestReadmeMetricsTable(t *testing.T) {
	upURL, _ := slowUpstream(t, 0)
	s := startSidecar(t, map[string]string{"LOOMGATE_UPSTREAM": upURL})
	mfs, err := s.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	exported := map[string]bool{}
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), "loomgate_") {
			exported[mf.GetName()] = true
		}
	}
	text := readme(t)
	section := text[strings.Index(text, "## Metrics"):]
	section = section[:strings.Index(section[3:], "\n## ")+3]
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile("`(loomgate_[a-z_]+)").FindAllStringSubmatch(section, -1) {
		documented[m[1]] = true
	}
	var missing, stale []string
	for name := range exported {
		if !documented[name] {
			missing = append(missing, name)
		}
	}
	for name := range documented {
		if !exported[name] {
			stale = append(stale, name)
		}
	}
	sort.Strings(missing)
	sort.Strings(stale)
	if len(missing) > 0 {
		t.Errorf("exported but not in README's metrics table: %v", missing)
	}
	if len(stale) > 0 {
		t.Errorf("in README's metrics table but not exported: %v", stale)
	}
}
