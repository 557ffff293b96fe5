package main

import (
	"context"
	"fmt"
	"io"
)

func runStub(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "loomgate stub: not in this build yet")
	return 2
}

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "loomgate bench: not in this build yet")
	return 2
}
