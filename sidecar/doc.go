// Package sidecar builds loomgate's parts (limiter, proxy, metrics, admin
// endpoints) from one validated Config and runs them: the one place where
// they are wired together. Config's tags name the LOOMGATE_* variables;
// Validate states each rule once, in the part that owns it, and reports
// every problem by Config field, which Variables maps to its variable.
package sidecar
