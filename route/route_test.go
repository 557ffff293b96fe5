package route

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

func TestParseNamesPatternsInOrder(t *testing.T) {
	r, err := Parse("checkout=POST /api/checkout, search=/api/search, user=/users/*/orders")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(r.Names(), ","), "other,checkout,search,user"; got != want {
		t.Fatalf("Names = %s; want %s", got, want)
	}
	for _, tt := range []struct {
		method, target, want string
	}{
		{"POST", "/api/checkout", "checkout"},
		{"POST", "/api/checkout/confirm?x=1", "checkout"},
		{"GET", "/api/checkout", "other"}, // the method is part of the pattern
		{"GET", "/api/search?q=a/b", "search"},
		{"DELETE", "/api/search#frag", "search"},
		{"GET", "/users/7/orders", "user"},
		{"GET", "/users/7/orders/3", "user"},
		{"GET", "/users/7", "other"},
		{"GET", "/users//orders", "other"}, // "*" is one non-empty segment
		{"GET", "/", "other"},
	} {
		if got := r.Names()[r.Class([]byte(tt.method), []byte(tt.target))]; got != tt.want {
			t.Errorf("Class(%s %s) = %s; want %s", tt.method, tt.target, got, tt.want)
		}
	}
}

func TestParseRejectsWhatItCannotHonour(t *testing.T) {
	many := make([]string, Max+1)
	for i := range many {
		many[i] = fmt.Sprintf("r%d=/p%d", i, i)
	}
	for _, tt := range []struct{ in, want string }{
		{"checkout", `"checkout" is not name=pattern`},
		{"checkout=", `"checkout=" is not name=pattern`},
		{"a b=/x", `"a b": a name is 1 to 32 letters`},
		{"a=/x, a=/y", `"a" is named twice`},
		{"other=/x", `"other" is named twice (or is "other", which is taken)`},
		{"a=api", "a=api: the path must start with /"},
		{strings.Join(many, ","), "33 routes; at most 32"},
		// Patterns no request's path can match.
		{"a=/x/**", `a=/x/**: "**"; * stands for one whole segment`},
		{"a=/a*", `a=/a*: "a*"; * stands for one whole segment`},
		{"a=/users/*x/orders", `"*x"; * stands for one whole segment`},
		{"a=/search?q=1", `a=/search?q=1: the path has '?'`},
		{"a=/page#top", `a=/page#top: the path has '#'`},
		{"a=GET /a b", `a=/a b: the path has ' '`},
		{"a=/a b", `a=/a b: the path has ' '`},
		{"a=/a\tb", `: the path has '\t'`},
	} {
		_, err := Parse(tt.in)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Parse(%q) = %v; want an error containing %q", tt.in, err, tt.want)
		}
	}
}

func TestAutomaticClassesAreMethodAndFirstSegmentAndBounded(t *testing.T) {
	r, err := Parse("  ")
	if err != nil {
		t.Fatal(err)
	}
	users := r.Class([]byte("GET"), []byte("/users/7?x=1"))
	if got := r.Names()[users]; got != "GET /users" {
		t.Fatalf("class of GET /users/7 = %q; want GET /users", got)
	}
	if again := r.Class([]byte("GET"), []byte("/users/8")); again != users {
		t.Errorf("GET /users/8 is class %d; want %d, that of GET /users/7", again, users)
	}
	if post := r.Class([]byte("POST"), []byte("/users")); post == users {
		t.Error("POST /users shares GET /users' class; the method is part of an automatic class")
	}
	// Paths past the bound fall into other, whatever clients try.
	for i := range 3 * Max {
		r.Class([]byte("GET"), fmt.Appendf(nil, "/p%d", i))
	}
	if got, want := len(r.Names()), Max+1; got != want {
		t.Errorf("%d classes after %d distinct paths; want %d (other and Max)", got, 3*Max, want)
	}
	if c := r.Class([]byte("GET"), []byte("/never-seen")); c != 0 {
		t.Errorf("a new path once the classes are full is class %d; want 0 (other)", c)
	}
	long := "/" + strings.Repeat("x", 100)
	if c := r.Class([]byte("GET"), []byte(long)); c != 0 {
		t.Errorf("a segment too long to name is class %d; want 0 (other)", c)
	}
}

func TestAutomaticClassNamesArePrintableUTF8(t *testing.T) {
	r, _ := Parse("")
	for _, target := range []string{"/\xff", "/a\x01b/c", "/x\x7f", "/caf\xc3"} {
		if c := r.Class([]byte("GET"), []byte(target)); c != 0 {
			t.Errorf("GET %q is class %d (%q); want 0 (other)", target, c, r.Names()[c])
		}
	}
	if c := r.Class([]byte("G\xffT"), []byte("/a")); c != 0 {
		t.Errorf("a method that is not UTF-8 is class %d; want 0 (other)", c)
	}
	if c := r.Class([]byte("GET"), []byte("/caf\xc3\xa9")); c == 0 || r.Names()[c] != "GET /café" {
		t.Errorf("GET /café is class %d; want a class of its own", c)
	}
}

func TestClassifyingConcurrentlyNamesEachClassOnce(t *testing.T) {
	r, _ := Parse("")
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				r.Class([]byte("GET"), fmt.Appendf(nil, "/p%d/%d", i%10, g))
			}
		})
	}
	wg.Wait()
	names := r.Names()
	if len(names) != 11 {
		t.Fatalf("names = %v; want other and 10 classes", names)
	}
	seen := map[string]bool{}
	for i, n := range names {
		if seen[n] {
			t.Errorf("class %q named twice", n)
		}
		seen[n] = true
		if i > 0 && r.Class([]byte("GET"), []byte("/"+strings.TrimPrefix(n, "GET /"))) != i {
			t.Errorf("class %q does not classify back to %d", n, i)
		}
	}
}

func TestClassDoesNotAllocate(t *testing.T) {
	auto, _ := Parse("")
	auto.Class([]byte("GET"), []byte("/users/1"))
	named, _ := Parse("user=/users/*")
	for name, r := range map[string]*Classes{"automatic": auto, "named": named} {
		if n := testing.AllocsPerRun(100, func() { r.Class([]byte("GET"), []byte("/users/1?q")) }); n != 0 {
			t.Errorf("%s: Class allocates %.0f times; want 0", name, n)
		}
	}
}
