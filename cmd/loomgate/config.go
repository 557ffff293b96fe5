package main

import "github.com/loomgate/loomgate/sidecar"

// configVars lists every variable sidecar.Config reads, in declaration
// order: the one map from fields to variable names. sidecar.ParseEnviron
// reads them.
func configVars() []sidecar.Variable { return sidecar.Variables() }
