// Package metrics exports what admission does to requests for Prometheus.
//
// Requests by outcome, queue wait, service and total time are histograms;
// the admission state is read at each scrape, and its high-water marks are
// kept for PeakWindow so that every scraper sees every peak. The advice's
// estimates and predictions are exported as they are given (Config.Advice):
// estimating is the advice package's job, exporting this one's.
//
// It knows nothing of the proxy, the limiter or the advice: finished
// requests arrive as Samples, state and numbers through the closures in
// Config.
package metrics
