// Package checks holds the repository's checks: the deploy manifests read
// as kubectl, the Prometheus operator and Grafana read them, the Dockerfile
// read as docker build and /bin/sh would, the Prometheus rules and alerts
// in a real Prometheus, the README's tables and snippets against the code,
// and the status page in a real browser. They are a module of their own so
// that the product's go.mod lists only what the product needs: the
// Kubernetes, Grafana, shell-parser and browser modules these checks read
// the repository with are required here alone. Run them from this
// directory with `go test ./...`.
package checks
