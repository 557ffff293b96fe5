package main

import (
	"context"
	"fmt"
	"io"
)

func runAdvise(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "loomgate advise: not in this build yet")
	return 2
}
