package cli

import (
	"bytes"
	"flag"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	for _, tt := range []struct {
		args []string
		exit int
		ok   bool
		want string
	}{
		{[]string{"--window", "4s"}, 0, true, ""},
		{[]string{"--window", "4"}, 2, false, "cmd: --window 4: a duration needs a unit, as in 4s or 4ms (cmd -h)\n"},
		{[]string{"--window", "0.5"}, 2, false, "cmd: --window 0.5: a duration needs a unit, as in 0.5s or 0.5ms (cmd -h)\n"},
		{[]string{"--window", "later"}, 2, false, "cmd: --window \"later\": want a duration such as 10s, 500ms or 1m (cmd -h)\n"},
		{[]string{"--windows", "4s"}, 2, false, "cmd: unknown flag --windows; did you mean --window? (cmd -h)\n"},
		{[]string{"-x"}, 2, false, "cmd: unknown flag -x (cmd -h)\n"},
		{[]string{"-c", "x"}, 2, false, "cmd: -c \"x\": want a whole number (cmd -h)\n"},
		{[]string{"--ratio", "x"}, 2, false, "cmd: --ratio \"x\": want a number (cmd -h)\n"},
		{[]string{"--quiet=x"}, 2, false, "cmd: --quiet \"x\": want true or false (cmd -h)\n"},
		{[]string{"--window"}, 2, false, "cmd: --window needs a value (cmd -h)\n"},
		{[]string{"-h"}, 0, false, "usage\n"},
	} {
		fs := flag.NewFlagSet("cmd", flag.ContinueOnError)
		var stderr bytes.Buffer
		fs.SetOutput(&stderr)
		fs.Duration("window", time.Second, "")
		fs.Int("c", 1, "")
		fs.Float64("ratio", 1, "")
		fs.Bool("quiet", false, "")
		fs.Usage = func() { stderr.WriteString("usage\n") }
		exit, ok := Parse(fs, tt.args, &stderr)
		if exit != tt.exit || ok != tt.ok || stderr.String() != tt.want {
			t.Errorf("Parse(%q) = %d, %v, said %q; want %d, %v, %q", tt.args, exit, ok, stderr.String(), tt.exit, tt.ok, tt.want)
		}
	}
}

func TestClosest(t *testing.T) {
	names := []string{"demo", "bench", "stub", "c", "window"}
	for name, want := range map[string]string{"demoo": "demo", "bnech": "bench", "x": "", "windw": "window", "serve": "", "st": ""} {
		if got := Closest(name, names); got != want {
			t.Errorf("Closest(%q) = %q; want %q", name, got, want)
		}
	}
}
