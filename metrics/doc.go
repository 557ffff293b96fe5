// Package metrics observes what admission does to requests, exports it for
// Prometheus, and advises on the admission settings.
//
// Requests by outcome, queue wait, service and total time are histograms;
// the admission state is read at each scrape. Beside them a sliding window
// (Window, in BucketWidth buckets) keeps the last minute's rates, means,
// quantiles and time-averaged in-flight and queued requests, from which it
// estimates the upstream's capacity (throughput × unloaded service time)
// and whether the upstream is saturated, fits the upstream's memory against
// the requests in flight (read from its own Prometheus endpoint), and
// derives a Recommendation with Advise. Snapshot returns all of it; Run
// keeps the sampled parts current.
//
// It knows nothing of the proxy or the limiter: finished requests arrive as
// Samples, state through the closures in Config.
package metrics
