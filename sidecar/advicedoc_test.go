package sidecar

import (
	"maps"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// adviceSection is the heading of docs/advice.md's section that documents
// every field of AdviceDoc: the top level's table first, then one
// subsection per nested object, headed by its path ("### `figures.routes[]`"),
// each with a table whose rows start with a field's name ("| `name` |").
const adviceSection = "## The JSON of `/advice`"

// TestAdviceJSONDocumented holds docs/advice.md to the JSON of /advice:
// every field AdviceDoc can encode, however deeply nested, has a row in
// the table of its own object, and no row names a field that object does
// not have. A name found anywhere in the section would not do: in_flight
// is a field of seven objects, and an eighth would pass unexplained.
func TestAdviceJSONDocumented(t *testing.T) {
	raw, err := os.ReadFile("../docs/advice.md")
	if err != nil {
		t.Fatal(err)
	}
	tables := adviceTables(t, string(raw))

	objects := map[string][]string{}
	jsonObjects(reflect.TypeFor[AdviceDoc](), "", objects)
	total := 0
	for _, names := range objects {
		total += len(names)
	}
	if len(objects) < 15 || total < 150 {
		// A walk that found almost nothing would pass against any text.
		t.Fatalf("found %d objects and %d fields in AdviceDoc; want the whole tree", len(objects), total)
	}
	for _, path := range slices.Sorted(maps.Keys(objects)) {
		rows, ok := tables[path]
		if !ok {
			t.Errorf("docs/advice.md's section %q has no subsection \"### `%s`\"; its fields %v are not documented", adviceSection, path, objects[path])
			continue
		}
		for _, name := range objects[path] {
			if !slices.Contains(rows, name) {
				t.Errorf("field %s (`%s`) has no row in docs/advice.md's table of %s", join(path, name), name, objectName(path))
			}
		}
		for _, name := range rows {
			if !slices.Contains(objects[path], name) {
				t.Errorf("docs/advice.md's table of %s has a row `%s`, which AdviceDoc does not have there", objectName(path), name)
			}
		}
	}
	for path := range tables {
		if _, ok := objects[path]; !ok {
			t.Errorf("docs/advice.md has a subsection \"### `%s`\", which is no object of AdviceDoc", path)
		}
	}
}

// adviceTables reads the section: for each object's path ("" for the top
// level, before the first subsection), the field names its table's rows
// start with.
func adviceTables(t *testing.T, doc string) map[string][]string {
	t.Helper()
	start := strings.Index(doc, "\n"+adviceSection+"\n")
	if start < 0 {
		t.Fatalf("docs/advice.md has no section %q", adviceSection)
	}
	tables := map[string][]string{"": nil}
	path := ""
	for line := range strings.Lines(doc[start+1+len(adviceSection):]) {
		line = strings.TrimRight(line, "\n")
		switch {
		case strings.HasPrefix(line, "## "):
			return tables
		case strings.HasPrefix(line, "### "):
			head, ok := strings.CutPrefix(line, "### `")
			if i := strings.Index(head, "`"); ok && i > 0 {
				path = head[:i]
				tables[path] = []string{}
			} else {
				t.Fatalf("docs/advice.md: subsection %q of %q does not name an object as \"### `path`\"", line, adviceSection)
			}
		case strings.HasPrefix(line, "| `"):
			name, _, ok := strings.Cut(line[len("| `"):], "` |")
			if !ok {
				t.Fatalf("docs/advice.md: row %q does not start with a field's name alone", line)
			}
			tables[path] = append(tables[path], name)
		}
	}
	return tables
}

// jsonObjects records, for t and every object nested in it, the names of
// the fields encoding/json writes, by the object's path from the root
// (figures.routes[] for the elements of a slice). It descends into
// structs, pointers and slices; time.Time is a leaf, as json writes it.
func jsonObjects(t reflect.Type, path string, objects map[string][]string) {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || t == reflect.TypeFor[time.Time]() {
		return
	}
	names := []string{}
	for sf := range t.Fields() {
		if !sf.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = sf.Name
		}
		names = append(names, name)
		sub := join(path, name)
		if k := sf.Type.Kind(); k == reflect.Slice || k == reflect.Array {
			sub += "[]"
		}
		jsonObjects(sf.Type, sub, objects)
	}
	objects[path] = names
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func objectName(path string) string {
	if path == "" {
		return "the top level"
	}
	return "`" + path + "`"
}
