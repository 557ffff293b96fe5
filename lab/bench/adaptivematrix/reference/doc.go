// Package reference re-implements two published adaptive concurrency
// controllers, for the lab's adaptive scenario to compare loomgate's with:
// Envoy's adaptive concurrency filter's gradient controller, and Netflix
// concurrency-limits' Gradient2Limit behind its WindowedLimit. Each follows
// its source's algorithm and defaults; where the lab's seam differs from
// the original's (a timer grid, the in-flight count's moment), the type's
// comment says so.
//
// Both sit where loomgate sits, in front of the upstream, and measure what
// their originals measure there: each request's time from its admission to
// its answer. They move the limit of loomgate's own limiter, whose queue
// holds what the limit does not admit (Envoy answers 503 instead, and
// Netflix's SimpleLimiter rejects), so that only the controllers differ
// between the scenario's arms.
//
// They live in the lab and are never linked into the sidecar's binary.
package reference
