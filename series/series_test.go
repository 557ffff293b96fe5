package series

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

func TestParse(t *testing.T) {
	tests := []struct {
		in      string
		want    Selector
		wantErr string // part of the error; empty when it must parse
	}{
		{in: "process_resident_memory_bytes", want: Selector{Name: "process_resident_memory_bytes"}},
		{in: `  jvm_memory_used_bytes{area="heap"} `, want: Selector{Name: "jvm_memory_used_bytes", Matchers: []Matcher{{Label: "area", Value: "heap"}}}},
		{in: `jvm_memory_used_bytes{ area = "heap" , id != "Metaspace", }`, want: Selector{Name: "jvm_memory_used_bytes",
			Matchers: []Matcher{{Label: "area", Value: "heap"}, {Label: "id", Value: "Metaspace", Negate: true}}}},
		{in: `ns:mem_bytes:sum{}`, want: Selector{Name: "ns:mem_bytes:sum"}},
		{in: `m{pool="G1 \"Old\" \\ Gen\n"}`, want: Selector{Name: "m", Matchers: []Matcher{{Label: "pool", Value: "G1 \"Old\" \\ Gen\n"}}}},
		{in: `m{a=""}`, want: Selector{Name: "m", Matchers: []Matcher{{Label: "a", Value: ""}}}},
		{in: "", wantErr: "want a metric name"},
		{in: "9lives", wantErr: "want a metric name"},
		{in: "m x", wantErr: "label matchers go in braces"},
		{in: `m{area=heap}`, wantErr: "double quotes"},
		{in: `m{area=~"he.*"}`, wantErr: "regular expression"},
		{in: `m{area!~"he.*"}`, wantErr: "regular expression"},
		{in: `m{area:x="heap"}`, wantErr: "want = or !="},
		{in: `m{="heap"}`, wantErr: "want a label name"},
		{in: `m{area="heap"`, wantErr: "want , or }"},
		{in: `m{area="heap}`, wantErr: "missing closing quote"},
		{in: `m{area="\t"}`, wantErr: `unknown escape`},
		{in: `m{area="heap"} x`, wantErr: "after the closing brace"},
		{in: `m{area="a" area2}`, wantErr: "want , or }"},
	}
	for _, tt := range tests {
		got, err := Parse(tt.in)
		if tt.wantErr != "" {
			if err == nil || !errors.Is(err, ErrSelector) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Parse(%q) = %v; want ErrSelector saying %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("Parse(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
	}
}

const exposition = `# HELP jvm_memory_used_bytes The amount of used memory
# TYPE jvm_memory_used_bytes gauge
jvm_memory_used_bytes{area="heap",id="G1 Eden Space"} 1.5e+08
jvm_memory_used_bytes{area="heap",id="G1 Old Gen"} 3e+08
jvm_memory_used_bytes{area="heap",id="G1 Survivor Space"} 1e+07
jvm_memory_used_bytes{area="nonheap",id="Metaspace"} 9e+07
# HELP process_resident_memory_bytes Resident memory size in bytes.
# TYPE process_resident_memory_bytes gauge
process_resident_memory_bytes 7.5e+08
# TYPE requests_total counter
requests_total{path="/a"} 10
requests_total{path="/b"} 5
# TYPE latency_seconds histogram
latency_seconds_bucket{le="+Inf"} 3
latency_seconds_sum 1
latency_seconds_count 3
`

func TestSelectorSum(t *testing.T) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(exposition))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		sel        string
		want       float64
		wantSeries int
	}{
		{"process_resident_memory_bytes", 7.5e8, 1},
		{`jvm_memory_used_bytes{area="heap"}`, 4.6e8, 3},
		{`jvm_memory_used_bytes`, 5.5e8, 4},
		{`jvm_memory_used_bytes{area="heap",id!="G1 Eden Space"}`, 3.1e8, 2},
		{`jvm_memory_used_bytes{missing=""}`, 5.5e8, 4}, // a label a series lacks is ""
		{`jvm_memory_used_bytes{area="off-heap"}`, 0, 0},
		{`requests_total`, 15, 2},
		{`latency_seconds`, 0, 0}, // a histogram has no single value
		{`nothing_here`, 0, 0},
	}
	for _, tt := range tests {
		got, n := MustParse(tt.sel).Sum(families)
		if got != tt.want || n != tt.wantSeries {
			t.Errorf("%s: Sum = %v over %d series; want %v over %d", tt.sel, got, n, tt.want, tt.wantSeries)
		}
	}
}

// FuzzParse checks that the parser never panics on what an
// operator may write, and that what it accepts it writes back in a form
// that parses to the same selector.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"process_resident_memory_bytes",
		`jvm_memory_used_bytes{area="heap"}`,
		`m{a!="x\"y\\z\n",b="",}`,
		`m{a=~"x"}`, `m{`, `{a="b"}`, `m{a="b"} junk`, "m\t{ a = \"b\" }",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sel, err := Parse(s)
		if err != nil {
			if !errors.Is(err, ErrSelector) {
				t.Fatalf("Parse(%q) = %v; want an ErrSelector", s, err)
			}
			return
		}
		if sel.Name == "" {
			t.Fatalf("Parse(%q) accepted an empty name", s)
		}
		again, err := Parse(sel.String())
		if err != nil || !reflect.DeepEqual(again, sel) {
			t.Fatalf("Parse(%q) = %+v, written %q, which parses to %+v, %v", s, sel, sel.String(), again, err)
		}
	})
}

func ExampleParse() {
	sel, err := Parse(`jvm_memory_used_bytes{area="heap", id!="Metaspace"}`)
	if err != nil {
		panic(err)
	}
	fmt.Println(sel.Name, len(sel.Matchers))
	fmt.Println(sel)
	_, err = Parse(`jvm_memory_used_bytes{area=~"heap"}`)
	fmt.Println(err)
	// Output:
	// jvm_memory_used_bytes 2
	// jvm_memory_used_bytes{area="heap",id!="Metaspace"}
	// series: bad selector: regular expression matchers are not supported; use = or !=
}
