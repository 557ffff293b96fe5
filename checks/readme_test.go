package checks

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/loomgate/loomgate/sidecar"
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

// TestReadmeLength keeps the README a page a first reader gets through:
// what is in depth belongs in docs/, linked from it.
func TestReadmeLength(t *testing.T) {
	if n := strings.Count(readme(t), "\n"); n > 450 {
		t.Errorf("README is %d lines; keep it under 450, with the detail in docs/", n)
	}
}

func TestReadmeConfigurationTable(t *testing.T) {
	row := regexp.MustCompile("(?m)^\\| `(LOOMGATE_[A-Z_]+)` \\| (`([^`]*)`|empty) \\|")
	documented := map[string]string{}
	for _, m := range row.FindAllStringSubmatch(readme(t), -1) {
		documented[m[1]] = m[3]
	}
	for _, v := range sidecar.Variables() {
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
	// Fixed mode, so that loomgate_capacity (the limit there) exists
	// without waiting for an estimate.
	// Priorities, so that the per-level series exist.
	s := startSidecar(t, map[string]string{"LOOMGATE_UPSTREAM": upURL, "LOOMGATE_MODE": "fixed",
		"LOOMGATE_ROUTES": "r=/r", "LOOMGATE_PRIORITIES": "r=critical"})
	// Enough traffic for the route and prediction series to exist.
	for range 150 {
		resp, err := http.Get(s.URL + "/r")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	waitUntil(t, func() bool { return s.Value(t, "loomgate_requests_total", "outcome", "ok") == 150 })
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
	for _, m := range regexp.MustCompile("`(loomgate_[a-z0-9_]+)").FindAllStringSubmatch(section, -1) {
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

// TestReadmeGoRetrySnippet runs the net/http retry snippet the README
// links to (docs/retries.md), as a
// program of its own, against a sidecar whose only worker is busy: its
// first attempt is rejected, and it must wait the Retry-After and get the
// service's answer.
func TestReadmeGoRetrySnippet(t *testing.T) {
	b, err := os.ReadFile(fromRepoRoot("docs", "retries.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	at := strings.Index(text, "Go's `net/http`")
	if at < 0 {
		t.Fatal("docs/retries.md has no net/http retry snippet")
	}
	block := regexp.MustCompile("(?s)```go\n(.*?)```").FindStringSubmatch(text[at:])
	if block == nil {
		t.Fatal("no go code block after the net/http heading")
	}
	program := `package main

import (
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

` + block[1] + `
func main() {
	req, _ := http.NewRequest("GET", os.Args[1], nil)
	resp, err := do(http.DefaultClient, req)
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	fmt.Println(resp.StatusCode)
}
`
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(program), 0o644); err != nil {
		t.Fatal(err)
	}
	upURL, _ := slowUpstream(t, 700*time.Millisecond)
	s := startSidecar(t, map[string]string{
		"LOOMGATE_UPSTREAM": upURL, "LOOMGATE_MODE": "fixed", "LOOMGATE_WORKERS": "1", "LOOMGATE_QUEUE_SIZE": "0",
		"LOOMGATE_REJECT_STATUS": "429",
	})
	// Build first, so that the worker is busy when the program runs.
	bin := filepath.Join(dir, "retry")
	if out, err := exec.Command("go", "build", "-o", bin, filepath.Join(dir, "main.go")).CombinedOutput(); err != nil {
		t.Fatalf("the README's snippet does not build: %v\n%s", err, out)
	}
	busy := make(chan struct{})
	go func() {
		defer close(busy)
		if resp, err := http.Get(s.URL + "/busy"); err == nil {
			resp.Body.Close()
		}
	}()
	waitUntil(t, func() bool { return s.Stats().InFlight == 1 })
	out, err := exec.Command(bin, s.URL+"/retried").CombinedOutput()
	<-busy
	if err != nil || strings.TrimSpace(string(out)) != "200" {
		t.Errorf("snippet printed %q (%v); want 200 after one rejection and a wait", out, err)
	}
	if n := s.Value(t, "loomgate_requests_total", "outcome", "rejected_queue_full"); n != 1 {
		t.Errorf("%v rejections; want the one the snippet retried", n)
	}
}

// TestReadmeGoVersion holds the README's "with Go X or later" to go.mod's
// go line, the oldest toolchain that builds the module: an older one
// stops at go.mod, or fetches a newer one, before anything in the README
// runs.
func TestReadmeGoVersion(t *testing.T) {
	goMod, err := os.ReadFile(fromRepoRoot("go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	line := regexp.MustCompile(`(?m)^go (\S+)$`).FindSubmatch(goMod)
	if line == nil {
		t.Fatal("go.mod has no go line")
	}
	said := regexp.MustCompile(`with Go (\S+) or later`).FindAllStringSubmatch(readme(t), -1)
	if len(said) == 0 {
		t.Fatal(`the README does not say which Go it needs ("with Go X or later")`)
	}
	for _, m := range said {
		if m[1] != string(line[1]) {
			t.Errorf("the README says Go %s or later; go.mod's go line is %s", m[1], line[1])
		}
	}
}
