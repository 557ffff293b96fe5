package checks

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestMarkdownLinks: every relative link in the README, docs/ and
// deploy/README.md leads to a file that exists and, where it names an
// anchor, to a heading with that anchor, so that a section moved from one
// page to another leaves no link behind.
func TestMarkdownLinks(t *testing.T) {
	pages := []string{"README.md", filepath.Join("deploy", "README.md")}
	docs, err := filepath.Glob(fromRepoRoot("docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range docs {
		pages = append(pages, filepath.Join("docs", filepath.Base(d)))
	}
	// Code spans and blocks hold examples, not links.
	code := regexp.MustCompile("(?s)```.*?```|`[^`\n]*`")
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	checked := 0
	for _, page := range pages {
		b, err := os.ReadFile(fromRepoRoot(page))
		if err != nil {
			t.Fatal(err)
		}
		text := code.ReplaceAllString(string(b), "")
		for _, m := range link.FindAllStringSubmatch(text, -1) {
			ref := m[1]
			if strings.Contains(ref, "://") || strings.HasPrefix(ref, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(ref, "#")
			target := page
			if file != "" {
				target = filepath.Join(filepath.Dir(page), file)
			}
			checked++
			info, err := os.Stat(fromRepoRoot(target))
			if err != nil {
				t.Errorf("%s: link %s: %v", page, ref, err)
				continue
			}
			if anchor == "" || info.IsDir() {
				continue
			}
			data, err := os.ReadFile(fromRepoRoot(target))
			if err != nil {
				t.Errorf("%s: link %s: %v", page, ref, err)
				continue
			}
			if !hasHeading(string(data), anchor) {
				t.Errorf("%s: link %s: %s has no heading with the anchor %q", page, ref, target, anchor)
			}
		}
	}
	if checked < 20 {
		t.Errorf("checked %d links; the pages have more, the pattern missed them", checked)
	}
}
