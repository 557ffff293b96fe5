package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// modulePath is the module whose checkout holds the lab.
const modulePath = "github.com/loomgate/loomgate"

// labDir is the lab's directory in the checkout: a module of its own,
// which builds against the product beside it.
const labDir = "lab"

// buildingLab is said before the lab is built, the first thing a lab
// command prints.
const buildingLab = "building the lab (lab/cmd/loomlab), first run only: a minute or two on 2 cores; " +
	"later runs take seconds, from Go's build cache"

// runLab runs one of the lab's commands (demo, bench, stub). The sidecar's
// binary does not carry the lab: its load rig, reports and plots would
// weigh on every pod for commands no pod runs, and its module keeps their
// requirements out of the product's. From a checkout of the source, which
// is where `go run ./cmd/loomgate demo` is typed, the lab is built in its
// module with the same toolchain (once; later runs hit the build cache)
// and run with the same arguments; elsewhere the message says how to get
// it.
func runLab(cmd string, args []string, stderr io.Writer) int {
	root, err := moduleRoot()
	if err != nil {
		fmt.Fprintf(stderr, "loomgate %s: this binary carries the sidecar only, and %v.\n"+
			"Run it from a checkout of the source (go run ./cmd/loomgate %s), or build the lab in the checkout's %s directory:\n"+
			"  go build ./cmd/loomlab && ./loomlab %s\n", cmd, err, cmd, labDir, cmd)
		return 2
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		fmt.Fprintf(stderr, "loomgate %s: the lab is built from the checkout at %s with the go command, which is not on PATH\n", cmd, root)
		return 2
	}
	dir, err := os.MkdirTemp("", "loomlab-")
	if err != nil {
		fmt.Fprintf(stderr, "loomgate %s: %v\n", cmd, err)
		return 1
	}
	defer os.RemoveAll(dir)
	lab := filepath.Join(dir, "loomlab")
	// In the lab's directory, so that the go command builds in the lab's
	// module, whose go.mod has what the lab needs. The first build
	// compiles the lab's modules (plots, reports) and is silent for a
	// minute or more: say so before it starts, and how long it took.
	build := exec.Command(goTool, "build", "-o", lab, "./cmd/loomlab")
	build.Dir, build.Stdout, build.Stderr = filepath.Join(root, labDir), stderr, stderr
	fmt.Fprintf(stderr, "loomgate %s: %s\n", cmd, buildingLab)
	began := time.Now()
	if err := build.Run(); err != nil {
		fmt.Fprintf(stderr, "loomgate %s: building the lab (./cmd/loomlab in %s): %v\n", cmd, build.Dir, err)
		return 1
	}
	fmt.Fprintf(stderr, "loomgate %s: the lab built in %s\n", cmd, time.Since(began).Round(100*time.Millisecond))
	// The lab runs as a child, not in place of this process, so that the
	// temporary binary is removed when it ends. A terminal's SIGINT
	// reaches the whole process group, the lab included; a SIGTERM sent
	// to this process alone is passed on. Either way the lab decides when
	// it is done, and this process waits for it.
	terms := make(chan os.Signal, 1)
	signal.Notify(terms, syscall.SIGTERM)
	defer signal.Stop(terms)
	c := exec.Command(lab, append([]string{cmd}, args...)...)
	c.Stdin, c.Stdout, c.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := c.Start(); err != nil {
		fmt.Fprintf(stderr, "loomgate %s: %v\n", cmd, err)
		return 1
	}
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	for err == nil {
		select {
		case err = <-done:
			if err == nil {
				return 0
			}
		case sig := <-terms:
			c.Process.Signal(sig)
		}
	}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return max(exit.ExitCode(), 1)
	case err != nil:
		fmt.Fprintf(stderr, "loomgate %s: %v\n", cmd, err)
		return 1
	}
	return 0
}

// moduleRoot finds the checkout of modulePath that holds the working
// directory.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if isModuleRoot(filepath.Join(dir, "go.mod")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("the working directory is not in a checkout of %s", modulePath)
		}
		dir = parent
	}
}

// isModuleRoot reports whether the go.mod at path is modulePath's.
func isModuleRoot(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	lines := bufio.NewScanner(f)
	for lines.Scan() {
		if line := strings.TrimSpace(lines.Text()); strings.HasPrefix(line, "module ") {
			return strings.TrimSpace(strings.TrimPrefix(line, "module ")) == modulePath
		}
	}
	return false
}
