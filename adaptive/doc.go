// Package adaptive moves the limit of an Adaptive limiter: admission stays
// open until the estimator finds the upstream queueing inside, the limit is
// then set at its capacity, and bounded trial steps, judged by whether the
// upstream's throughput follows them, keep finding the capacity as it
// changes. It knows nothing of the proxy or the limiter: it is given
// functions that set the limit, read admission's state and read the
// estimate, and each answered request's service time through Record.
package adaptive
