package checks

import (
	"context"
	"debug/buildinfo"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"
	"mvdan.cc/sh/v3/shell"

	"github.com/loomgate/loomgate/sidecar"
	"github.com/loomgate/loomgate/sidecar/sidecartest"
)

// No Docker engine runs where these tests run, so they check the Dockerfile
// by reading it and by running its build stage's `go build` line exactly as
// written, in a copy of the build context filtered by .dockerignore.

// dockerStage is one FROM section of a Dockerfile.
type dockerStage struct {
	image        string // as written after FROM
	name         string // after AS, or ""
	instructions []dockerInstruction
}

type dockerInstruction struct {
	line int    // where it starts, for messages
	cmd  string // upper case: RUN, COPY, ...
	args string // the rest, continuation lines joined
}

func (s dockerStage) all(cmd string) []dockerInstruction {
	var out []dockerInstruction
	for _, in := range s.instructions {
		if in.cmd == cmd {
			out = append(out, in)
		}
	}
	return out
}

// parseDockerfile reads the stages of a Dockerfile. Instructions before the
// first FROM (global ARGs) are not kept: no test here needs them.
func parseDockerfile(t testing.TB, file string) []dockerStage {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var stages []dockerStage
	var logical strings.Builder
	start := 0
	for i, line := range strings.Split(string(data), "\n") {
		trimmed := strings.TrimSpace(line)
		if logical.Len() == 0 && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if logical.Len() == 0 {
			start = i + 1
		} else if strings.HasPrefix(trimmed, "#") {
			continue // comment lines inside a continued instruction
		}
		if body, ok := strings.CutSuffix(trimmed, `\`); ok {
			logical.WriteString(body)
			logical.WriteString(" ")
			continue
		}
		logical.WriteString(trimmed)
		text := logical.String()
		logical.Reset()

		cmd, args, _ := strings.Cut(text, " ")
		in := dockerInstruction{line: start, cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args)}
		if in.cmd == "FROM" {
			f := strings.Fields(in.args)
			st := dockerStage{image: f[0]}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				st.name = f[2]
			}
			stages = append(stages, st)
			continue
		}
		if len(stages) > 0 {
			stages[len(stages)-1].instructions = append(stages[len(stages)-1].instructions, in)
		}
	}
	if logical.Len() > 0 {
		t.Fatalf("%s: the last instruction ends with a line continuation", file)
	}
	if len(stages) == 0 {
		t.Fatalf("%s: no FROM", file)
	}
	return stages
}

// dockerGoBuild is the build stage's `go build` line, split into words the
// way /bin/sh would split it, with ARG and ENV values substituted.
type dockerGoBuild struct {
	stage  dockerStage
	line   int
	env    []string // NAME=value, from ENV and the line's own assignments
	argv   []string // starting with "go"
	output string   // the -o path
}

// findGoBuild locates the single RUN line that runs `go build` and expands
// it with the stage's ARG defaults, overridden by buildArgs as
// `docker build --build-arg` would.
func findGoBuild(t testing.TB, stages []dockerStage, buildArgs map[string]string) dockerGoBuild {
	t.Helper()
	gb, err := goBuildLine(stages, buildArgs)
	if err != nil {
		t.Fatal(err)
	}
	return gb
}

func goBuildLine(stages []dockerStage, buildArgs map[string]string) (dockerGoBuild, error) {
	var found []dockerGoBuild
	for _, st := range stages {
		vars := map[string]string{}
		var env []string
		for _, in := range st.instructions {
			switch in.cmd {
			case "ARG":
				name, def, _ := strings.Cut(in.args, "=")
				if strings.ContainsAny(def, `"'`) {
					words, err := dockerShellWords(def, vars)
					if err != nil || len(words) != 1 {
						return dockerGoBuild{}, fmt.Errorf("Dockerfile:%d: ARG %s: want one value (%v)", in.line, in.args, err)
					}
					def = words[0]
				}
				if v, ok := buildArgs[name]; ok {
					def = v
				}
				vars[name] = def
			case "ENV":
				words, err := dockerShellWords(in.args, vars)
				if err != nil {
					return dockerGoBuild{}, fmt.Errorf("Dockerfile:%d: ENV %s: %v", in.line, in.args, err)
				}
				for _, w := range words {
					name, value, ok := strings.Cut(w, "=")
					if !ok {
						return dockerGoBuild{}, fmt.Errorf("Dockerfile:%d: ENV %s: use the NAME=value form", in.line, in.args)
					}
					vars[name] = value
					env = append(env, w)
				}
			case "RUN":
				if !strings.Contains(in.args, "go build") {
					continue
				}
				words, err := dockerShellWords(in.args, vars)
				if err != nil {
					return dockerGoBuild{}, fmt.Errorf("Dockerfile:%d: RUN %s: %v", in.line, in.args, err)
				}
				gb := dockerGoBuild{stage: st, line: in.line, env: slices.Clone(env)}
				for len(words) > 0 && isShellAssignment(words[0]) {
					gb.env = append(gb.env, words[0])
					words = words[1:]
				}
				gb.argv = words
				found = append(found, gb)
			}
		}
	}
	if len(found) != 1 {
		return dockerGoBuild{}, fmt.Errorf("Dockerfile has %d RUN lines with `go build`; want exactly 1", len(found))
	}
	gb := found[0]
	if len(gb.argv) < 2 || gb.argv[0] != "go" || gb.argv[1] != "build" {
		return dockerGoBuild{}, fmt.Errorf("Dockerfile:%d: command is %q; want it to start with go build", gb.line, gb.argv)
	}
	for i, a := range gb.argv {
		if a == "-o" && i+1 < len(gb.argv) {
			if gb.output != "" {
				return dockerGoBuild{}, fmt.Errorf("Dockerfile:%d: -o given twice", gb.line)
			}
			gb.output = gb.argv[i+1]
		}
	}
	if gb.output == "" {
		return dockerGoBuild{}, fmt.Errorf("Dockerfile:%d: go build has no -o; want the binary written where the runtime stage copies it from", gb.line)
	}
	return gb, nil
}

func isShellAssignment(word string) bool {
	name, _, ok := strings.Cut(word, "=")
	return ok && regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`).MatchString(name)
}

// dockerShellWords splits a shell-form command into the words /bin/sh
// would run, $NAME and ${NAME} expanded from vars. It refuses what the build
// test could not run as the image build does: anything beyond one plain
// command (pipes, &&, redirections, command substitution), and a variable
// that no ARG or ENV of the stage defines, which sh would quietly expand to
// nothing.
func dockerShellWords(s string, vars map[string]string) ([]string, error) {
	var undefined []string
	words, err := shell.Fields(s, func(name string) string {
		v, ok := vars[name]
		// The expander itself reads IFS (unset: sh's default splitting)
		// and PWD; neither comes from the text.
		if !ok && name != "IFS" && name != "PWD" && !slices.Contains(undefined, name) {
			undefined = append(undefined, name)
		}
		return v
	})
	if err != nil {
		return nil, err
	}
	if len(undefined) > 0 {
		return nil, fmt.Errorf("$%s: not defined by an ARG or ENV of the stage", strings.Join(undefined, ", $"))
	}
	return words, nil
}

func TestDockerfileShellWords(t *testing.T) {
	vars := map[string]string{"VERSION": "v1.2.3", "COMMIT": "", "SPACED": "a b"}
	tests := []struct {
		in      string
		want    []string
		wantErr string // in the error; "" = no error
	}{
		{in: `CGO_ENABLED=0 go build -o /out/x ./cmd/x`, want: []string{"CGO_ENABLED=0", "go", "build", "-o", "/out/x", "./cmd/x"}},
		{in: `go build -ldflags "-s -X main.version=${VERSION} -X main.commit=${COMMIT}"`, want: []string{"go", "build", "-ldflags", "-s -X main.version=v1.2.3 -X main.commit="}},
		{in: `echo $VERSION '$VERSION' "a\"b"`, want: []string{"echo", "v1.2.3", "$VERSION", `a"b`}},
		{in: `echo "$SPACED"`, want: []string{"echo", "a b"}},
		{in: `echo $SPACED`, want: []string{"echo", "a", "b"}}, // split, as sh splits it
		{in: `echo ${UNDEFINED}`, wantErr: "$UNDEFINED: not defined"},
		{in: `go build ./... && strip x`, wantErr: "`&&` is not a valid word"},
		{in: `go build ./... | tee log`, wantErr: "`|` is not a valid word"},
		{in: `echo $(date)`, wantErr: "unexpected command substitution"},
		{in: `echo "open`, wantErr: "without closing quote"},
	}
	for _, tt := range tests {
		got, err := dockerShellWords(tt.in, vars)
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("dockerShellWords(%q) error = %v; want %q", tt.in, err, tt.want)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("dockerShellWords(%q) = %q, %v; want an error with %q", tt.in, got, err, tt.wantErr)
		case tt.wantErr == "" && !slices.Equal(got, tt.want):
			t.Errorf("dockerShellWords(%q) = %q; want %q", tt.in, got, tt.want)
		}
	}
}

// TestDockerfileBrokenCopy breaks the go build line of a copy of the
// Dockerfile and checks that reading it fails, naming the problem, where
// the build test could not run what the image build runs.
func TestDockerfileBrokenCopy(t *testing.T) {
	tests := []struct {
		name string
		old  string // in the go build line
		new  string
		want string // in the error
	}{
		{"misspelt build arg", "main.version=${VERSION}", "main.version=${VERSON}", "$VERSON: not defined by an ARG or ENV"},
		{"unterminated quote", "main.commit=${COMMIT}\"", "main.commit=${COMMIT}", "reached EOF without closing quote"},
		{"a second command", "./cmd/loomgate\n", "./cmd/loomgate && strip /out/loomgate\n", "`&&` is not a valid word"},
		{"command substitution", "main.commit=${COMMIT}", "main.commit=$(git rev-parse HEAD)", "unexpected command substitution"},
		{"no -o", "-o /out/loomgate ", "", "go build has no -o"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data, err := os.ReadFile(fromRepoRoot("Dockerfile"))
			if err != nil {
				t.Fatal(err)
			}
			file := filepath.Join(t.TempDir(), "Dockerfile")
			if err := os.WriteFile(file, data, 0o644); err != nil {
				t.Fatal(err)
			}
			editFile(t, file, [2]string{tt.old, tt.new})
			gb, err := goBuildLine(parseDockerfile(t, file), nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("go build line = %q, %v; want an error with %q", gb.argv, err, tt.want)
			}
		})
	}
}

// defaultPort is the port of a listen variable's default, such as 8080 for
// LOOMGATE_LISTEN=":8080".
func portOfDefault(t testing.TB, name string) int {
	t.Helper()
	for _, v := range sidecar.Variables() {
		if v.Name == name {
			return portOfListen(t, name, v.Default)
		}
	}
	t.Fatalf("sidecar.Variables() has no %s", name)
	return 0
}

func portOfListen(t testing.TB, name, addr string) int {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, addr, err)
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		t.Fatalf("%s=%q: port is not a number", name, addr)
	}
	return n
}

// TestDockerfile checks what the image promises without building it.
func TestDockerfile(t *testing.T) {
	stages := parseDockerfile(t, fromRepoRoot("Dockerfile"))
	gb := findGoBuild(t, stages, nil)
	joined := strings.Join(gb.argv, " ")

	if !slices.Contains(gb.env, "CGO_ENABLED=0") {
		t.Errorf("go build environment = %q; want CGO_ENABLED=0 for a static binary", gb.env)
	}
	for _, want := range []string{"-trimpath", "./cmd/loomgate", "-X main.version=", "-X main.commit="} {
		if !strings.Contains(joined, want) {
			t.Errorf("go build line = %q; want it to contain %q", joined, want)
		}
	}

	// The build image's Go matches go.mod's go line (the floating tag
	// golang:1.26 is always the newest 1.26.x, at or above go.mod's minimum).
	goMod, err := os.ReadFile(fromRepoRoot("go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	modGo := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindStringSubmatch(string(goMod))
	imageGo := regexp.MustCompile(`^golang:(\d+\.\d+)`).FindStringSubmatch(gb.stage.image)
	switch {
	case modGo == nil:
		t.Errorf("go.mod has no go line")
	case imageGo == nil:
		t.Errorf("build stage FROM %s; want golang:%s or a variant of it", gb.stage.image, modGo[1])
	case imageGo[1] != modGo[1]:
		t.Errorf("build stage FROM %s; want Go %s as in go.mod", gb.stage.image, modGo[1])
	}

	final := stages[len(stages)-1]
	if final.name == gb.stage.name && final.image == gb.stage.image {
		t.Fatalf("the last stage is the build stage; want a separate runtime stage")
	}
	if !strings.HasPrefix(final.image, "gcr.io/distroless/static") && final.image != "scratch" {
		t.Errorf("runtime stage FROM %s; want gcr.io/distroless/static-* or scratch (no shell, no libc)", final.image)
	}

	// COPY --from=<build stage> <go build -o path> <binary in the image>
	binary := ""
	for _, in := range final.all("COPY") {
		f := strings.Fields(in.args)
		if len(f) == 3 && (f[0] == "--from="+gb.stage.name || f[0] == "--from=0") && f[1] == gb.output {
			binary = f[2]
		}
	}
	if binary == "" {
		t.Fatalf("runtime stage has no COPY --from=%s %s <dest>; want the built binary copied", gb.stage.name, gb.output)
	}

	entry := final.all("ENTRYPOINT")
	var argv []string
	if len(entry) != 1 {
		t.Errorf("runtime stage has %d ENTRYPOINT; want 1", len(entry))
	} else if err := json.Unmarshal([]byte(entry[0].args), &argv); err != nil {
		t.Errorf("ENTRYPOINT %s is not the exec form: want [\"%s\"], so that loomgate is PID 1 and gets SIGTERM", entry[0].args, binary)
	} else if !slices.Equal(argv, []string{binary}) {
		t.Errorf("ENTRYPOINT = %q; want [%q]: no arguments runs the proxy", argv, binary)
	}

	users := final.all("USER")
	if len(users) == 0 {
		t.Errorf("runtime stage has no USER; want a numeric non-root user such as 65532:65532")
	}
	for _, u := range users {
		uid, _, _ := strings.Cut(u.args, ":")
		if n, err := strconv.Atoi(uid); err != nil || n == 0 {
			t.Errorf("USER %s; want a numeric non-zero uid, which Kubernetes' runAsNonRoot can verify", u.args)
		}
	}

	var exposed []int
	for _, in := range final.all("EXPOSE") {
		for _, p := range strings.Fields(in.args) {
			n, err := strconv.Atoi(strings.TrimSuffix(p, "/tcp"))
			if err != nil {
				t.Errorf("EXPOSE %s: not a TCP port number", p)
			}
			exposed = append(exposed, n)
		}
	}
	slices.Sort(exposed)
	want := []int{portOfDefault(t, "LOOMGATE_LISTEN"), portOfDefault(t, "LOOMGATE_ADMIN_LISTEN")}
	slices.Sort(want)
	if !slices.Equal(exposed, want) {
		t.Errorf("EXPOSE %v; want %v, the defaults of LOOMGATE_LISTEN and LOOMGATE_ADMIN_LISTEN", exposed, want)
	}

	if err := checkDockerignore(readDockerignore(t, fromRepoRoot(".dockerignore"))); err != nil {
		t.Error(err)
	}
}

// checkDockerignore wants the build stage's inputs in the build context
// and .git out of it, and the lab and the checks too: modules of their
// own, which the product's build never reads, so that `COPY . .` neither
// carries them nor changes when they do.
func checkDockerignore(ignore dockerignore) error {
	var problems []error
	for _, p := range []struct {
		path string
		in   bool // wanted in the build context
	}{
		{"go.mod", true}, {"go.sum", true}, {"cmd/loomgate/main.go", true}, {"cmd/loomgate/lab.go", true},
		{".git", false}, {"lab/go.mod", false}, {"lab/cmd/loomlab/main.go", false}, {"checks/go.mod", false},
	} {
		ignored, err := ignore.ignored(p.path)
		switch {
		case err != nil:
			problems = append(problems, fmt.Errorf(".dockerignore on %s: %w", p.path, err))
		case ignored && p.in:
			problems = append(problems, fmt.Errorf(".dockerignore excludes %s; the build stage needs it", p.path))
		case !ignored && !p.in:
			problems = append(problems, fmt.Errorf(".dockerignore keeps %s; want it excluded from the build context", p.path))
		}
	}
	return errors.Join(problems...)
}

// TestDockerfileBuild runs the build stage's go build line, as written, in a
// copy of the build context, and checks the binary the image would ship.
func TestDockerfileBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary; skipped with -short")
	}
	if runtime.GOOS != "linux" {
		t.Skipf("the image's binary is a linux one; this test builds and runs it, so it needs linux, not %s", runtime.GOOS)
	}
	goTool := sidecartest.RequireTool(t, "go", "golang-go")

	const version, commit = "v0.0.0-dockerfile-test", "0123456789abcdef0123456789abcdef01234567"
	gb := findGoBuild(t, parseDockerfile(t, fromRepoRoot("Dockerfile")), map[string]string{"VERSION": version, "COMMIT": commit})

	tmp := t.TempDir()
	buildContext := filepath.Join(tmp, "context")
	copyBuildContext(t, fromRepoRoot(), buildContext, readDockerignore(t, fromRepoRoot(".dockerignore")))

	bin := filepath.Join(tmp, "out", "loomgate")
	argv := slices.Clone(gb.argv)
	for i := range argv {
		if argv[i] == "-o" {
			argv[i+1] = bin
		}
	}
	cmd := exec.Command(goTool, argv[1:]...)
	cmd.Dir = buildContext
	// GOPROXY=off: the modules come from the local cache, never the network
	// (the image gets them from its `go mod download` layer).
	cmd.Env = append(append(os.Environ(), "GOPROXY=off"), gb.env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("Dockerfile:%d: %s (env %q) in the build context filtered by .dockerignore: %v\n%s", gb.line, strings.Join(gb.argv, " "), gb.env, err, out)
	}

	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("binary has a %v program header; want a static binary (CGO_ENABLED=0) for a distroless/static or scratch image", p.Type)
		}
	}

	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	if got := settings["-trimpath"]; got != "true" {
		t.Errorf("build setting -trimpath = %q; want true", got)
	}
	if got := settings["CGO_ENABLED"]; got != "0" {
		t.Errorf("build setting CGO_ENABLED = %q; want 0", got)
	}
	if info.Path != "github.com/loomgate/loomgate/cmd/loomgate" {
		t.Errorf("binary's main package = %q; want github.com/loomgate/loomgate/cmd/loomgate", info.Path)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("loomgate version: %v\n%s", err, out)
	}
	for _, want := range []string{version, commit} {
		if !strings.Contains(string(out), want) {
			t.Errorf("loomgate version printed %q; want it to contain %q, stamped by --build-arg", out, want)
		}
	}
}

// dockerignore is the build context filter of docker build: .dockerignore
// read and matched by the packages the docker CLI and BuildKit use.
type dockerignore struct {
	pm *patternmatcher.PatternMatcher
}

func readDockerignore(t testing.TB, file string) dockerignore {
	t.Helper()
	d, err := loadDockerignore(file)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// loadDockerignore reads file; without one, docker build sends everything.
func loadDockerignore(file string) (dockerignore, error) {
	var patterns []string
	f, err := os.Open(file)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return dockerignore{}, err
	default:
		defer f.Close()
		if patterns, err = ignorefile.ReadAll(f); err != nil {
			return dockerignore{}, fmt.Errorf("%s: %w", file, err)
		}
	}
	pm, err := patternmatcher.New(patterns)
	if err != nil {
		return dockerignore{}, fmt.Errorf("%s: %w", file, err)
	}
	return dockerignore{pm: pm}, nil
}

// ignored reports whether the slash-separated path rel, relative to the
// context root, is left out of the build context.
func (d dockerignore) ignored(rel string) (bool, error) {
	ignored, _, err := d.pm.MatchesUsingParentResults(rel, patternmatcher.MatchInfo{})
	return ignored, err
}

// copyBuildContext copies the regular files under src that .dockerignore
// keeps into dst.
func copyBuildContext(t testing.TB, src, dst string, ignore dockerignore) {
	t.Helper()
	parents := map[string]patternmatcher.MatchInfo{}
	err := filepath.WalkDir(src, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		// As BuildKit walks the context: each path matched with its
		// parent's results, and an ignored directory skipped unless a "!"
		// pattern could bring something under it back.
		ignored, info, err := ignore.pm.MatchesUsingParentResults(rel, parents[path.Dir(rel)])
		if err != nil {
			return fmt.Errorf(".dockerignore: %s: %w", rel, err)
		}
		if e.IsDir() {
			parents[rel] = info
		}
		if ignored {
			if e.IsDir() && !ignore.pm.Exclusions() {
				return filepath.SkipDir
			}
			return nil
		}
		target := filepath.Join(dst, filepath.FromSlash(rel))
		if e.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		if !e.Type().IsRegular() {
			return nil
		}
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return err
		}
		in, err := os.Open(p)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.Create(target)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
	if err != nil {
		t.Fatalf("copy build context: %v", err)
	}
}

// TestDockerfileIgnore pins the matching rules the checks above rely on.
func TestDockerfileIgnore(t *testing.T) {
	file := filepath.Join(t.TempDir(), ".dockerignore")
	if err := os.WriteFile(file, []byte("# comment\n.git\n/deploy\n*.test\ndocs\n!docs/keep.md\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d := readDockerignore(t, file)
	tests := []struct {
		path string
		want bool
	}{
		{".git", true},
		{".git/config", true},
		{"deploy/grafana/loomgate.json", true},
		{"loomgate.test", true},
		{"cmd/loomgate/loomgate.test", false}, // patterns are anchored at the root
		{"docs/keep.md", false},
		{"docs/other.md", true},
		{"go.mod", false},
		{"cmd/loomgate/main.go", false},
		{"# comment", false},
	}
	for _, tt := range tests {
		if got, err := d.ignored(tt.path); err != nil || got != tt.want {
			t.Errorf("ignored(%q) = %v, %v; want %v", tt.path, got, err, tt.want)
		}
	}
}

// TestDockerfileIgnoreBrokenCopy feeds broken .dockerignore files through
// the checks and wants each refused, naming the problem.
func TestDockerfileIgnoreBrokenCopy(t *testing.T) {
	tests := []struct {
		name  string
		extra string // appended to a copy of .dockerignore
		want  string // in the error
	}{
		{"unclosed bracket", "cmd/[loomgate\n", "syntax error in pattern"},
		{"bare exclusion", "!\n", `illegal exclusion pattern: "!"`},
		{"Go sources excluded", "**/*.go\n", ".dockerignore excludes cmd/loomgate/main.go"},
		{"go.sum excluded", "go.*\n", ".dockerignore excludes go.sum"},
		{".git brought back", "!.git\n", ".dockerignore keeps .git"},
		{"lab brought back", "!lab\n", ".dockerignore keeps lab/go.mod"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data, err := os.ReadFile(fromRepoRoot(".dockerignore"))
			if err != nil {
				t.Fatal(err)
			}
			file := filepath.Join(t.TempDir(), ".dockerignore")
			if err := os.WriteFile(file, append(data, tt.extra...), 0o644); err != nil {
				t.Fatal(err)
			}
			d, err := loadDockerignore(file)
			if err == nil {
				err = checkDockerignore(d)
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf(".dockerignore + %q: %v; want an error with %q", tt.extra, err, tt.want)
			}
		})
	}
}
