package checks

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/loomgate/loomgate/sidecar"
)

// TestReadmeFirstScreen keeps the README's "Start here" true: the commands
// it shows exist and take the flags shown, the demo's levels are the
// demo's, the variables are the binary's, the admin address is the
// default one, and every link leads to a file and heading that exist.
func TestReadmeFirstScreen(t *testing.T) {
	if testing.Short() {
		t.Skip("builds loomgate and the lab")
	}
	text := readme(t)
	start := strings.Index(text, "\n## Start here\n")
	if start < 0 {
		t.Fatal(`README has no "## Start here" section`)
	}
	section := text[start+1:]
	section = section[:strings.Index(section[3:], "\n## ")+3]

	root, err := filepath.Abs(fromRepoRoot())
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "loomgate")
	build := exec.Command("go", "build", "-o", bin, "./cmd/loomgate")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/loomgate: %v\n%s", err, out)
	}
	help := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(bin, append(args, "-h")...)
		cmd.Dir = root
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			t.Fatalf("loomgate %s -h: %v\n%s", strings.Join(args, " "), err, out.String())
		}
		return out.String()
	}

	// The commands in the code blocks, with their flags.
	ran := 0
	for _, block := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(section, -1) {
		for _, line := range strings.Split(block[1], "\n") {
			line, _, _ = strings.Cut(line, "#")
			words := strings.Fields(line)
			if len(words) < 4 || words[0] != "go" || words[1] != "run" || words[2] != "./cmd/loomgate" {
				continue
			}
			ran++
			usage := help(words[3])
			for _, w := range words[4:] {
				if !strings.HasPrefix(w, "-") {
					continue
				}
				name, _, _ := strings.Cut(strings.TrimLeft(w, "-"), "=")
				if !strings.Contains(usage, "-"+name+" ") && !strings.Contains(usage, "-"+name+"\n") {
					t.Errorf("README runs loomgate %s with %s, which loomgate %s -h does not list", words[3], w, words[3])
				}
			}
		}
	}
	if ran == 0 {
		t.Error(`"Start here" runs no go run ./cmd/loomgate command`)
	}

	// The demo's levels, as its -c default says.
	if m := regexp.MustCompile(`-c string\n.*\(default "([0-9,]+)"\)`).FindStringSubmatch(help("demo")); m == nil {
		t.Error("loomgate demo -h shows no default for -c")
	} else {
		levels := strings.Split(m[1], ",")
		words := strings.Join(levels[:len(levels)-1], ", ") + " and " + levels[len(levels)-1]
		if !strings.Contains(section, "load at "+words+" users") {
			t.Errorf(`"Start here" lacks "load at %s users", the demo's levels`, words)
		}
	}

	// Variables and the admin address.
	known := map[string]sidecar.Variable{}
	for _, v := range sidecar.Variables() {
		known[v.Name] = v
	}
	for _, name := range regexp.MustCompile(`LOOMGATE_[A-Z0-9_]+`).FindAllString(section, -1) {
		if _, ok := known[name]; !ok {
			t.Errorf(`"Start here" names %s, which the binary does not read`, name)
		}
	}
	_, adminPort, _ := net.SplitHostPort(known["LOOMGATE_ADMIN_LISTEN"].Default)
	for _, u := range regexp.MustCompile(`http://127\.0\.0\.1:(\d+)/`).FindAllStringSubmatch(section, -1) {
		if u[1] != adminPort {
			t.Errorf(`"Start here" sends to %s; the admin port is %s by default`, u[0], adminPort)
		}
	}

	// Links: the file, and the heading an anchor names.
	for _, m := range regexp.MustCompile(`\]\(([^)]+)\)`).FindAllStringSubmatch(section, -1) {
		file, anchor, _ := strings.Cut(m[1], "#")
		target := "README.md"
		if file != "" {
			target = file
		}
		data, err := os.ReadFile(fromRepoRoot(target))
		if err != nil {
			t.Errorf("link %s: %v", m[1], err)
			continue
		}
		if anchor != "" && !hasHeading(string(data), anchor) {
			t.Errorf("link %s: %s has no heading with the anchor %q", m[1], target, anchor)
		}
	}
}

// hasHeading reports whether markdown has a heading whose GitHub anchor is
// anchor: lower case, punctuation dropped, spaces as hyphens.
func hasHeading(markdown, anchor string) bool {
	drop := regexp.MustCompile(`[^\p{L}\p{N} _-]`)
	for _, line := range strings.Split(markdown, "\n") {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.TrimSpace(strings.TrimLeft(line, "#"))
		h = strings.ReplaceAll(h, "`", "")
		slug := strings.ReplaceAll(drop.ReplaceAllString(strings.ToLower(h), ""), " ", "-")
		if slug == anchor {
			return true
		}
	}
	return false
}
