package main

import (
	"context"
	"fmt"
	"io"
)

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "loomgate demo: coming with the load rig; see the README for a two-terminal example")
	return 2
}
