// Package advice estimates, from what admission does to requests, whether
// the upstream queues inside and what it can serve, and predicts what each
// admission setting would do.
//
// Finished requests arrive as outcome records and fill a sliding window
// (Window, in BucketWidth buckets, kept for History) by the route class the
// proxy gave each as it met admission (Routes: named patterns, or method
// and first path segment, bounded by route.Max). The
// estimate compares each route with itself at other loads: a route is
// queueing inside the upstream when its service time (the first quartile,
// which neither a wide spread nor a mix of cheap and expensive requests
// moves) has grown over its least loaded buckets' while the load grew with
// it. Routes that wait together as the total load rises share the
// upstream's bottleneck; one that waits alone has its own. The baseline is
// read by the second where the load changed within a bucket. The capacity
// is what the upstream served at once, in unloaded service times, while
// every route queued. Where the load never varied enough to tell, the
// capacity is unknown, not a guess, and nothing is predicted or advised
// beyond what the upstream was seen to serve. Advise turns the figures into a
// Recommendation, and package predict simulates each alternative setting
// against the measured demand and service times; package memory fits the
// upstream's memory (read from its own metrics) against its load.
//
// It knows nothing of the proxy: requests arrive as records, admission
// state through Config.State. Exporting is the metrics package's job.
package advice
