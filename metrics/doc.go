// Package metrics observes what admission does to requests and exports it
// for Prometheus: requests by outcome, queue wait, service and total time as
// histograms, and the admission state read at each scrape.
//
// It knows nothing of the proxy or the limiter: finished requests arrive as
// Samples, state through the closures in Config.
package metrics
