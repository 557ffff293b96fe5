// Package proxy forwards HTTP requests to one upstream through an admission
// Policy and reports what happened to each request as an Outcome.
//
// The proxy is a fasthttp server in front of a fasthttp.HostClient. It
// removes hop-by-hop headers in both directions, appends X-Forwarded-For,
// sets X-Forwarded-Proto and X-Forwarded-Host, keeps Host, forwards the
// request target byte for byte and never retries. Request bodies above 8 KiB
// and response bodies above 64 KiB stream through instead of being buffered.
//
// Every request, whatever its protocol, meets admission the same way
// (package internal/admission): classified by route, its bytes reserved,
// admitted under the Policy at once, after a wait or not at all, and
// finished as one Outcome. The protocols only read, write and frame.
//
// Each request reserves from the Policy the memory it may hold
// (Config.Reserve; RequestBytes is the proxy's measure: a fixed overhead
// plus the declared body). A response body to be buffered is charged when
// its headers arrive, if the Policy can reserve more without waiting, and
// streamed instead when the memory bulkhead has no room for it; so the bytes
// reserved bound what the proxy holds, and a bulkhead on them is never
// exceeded.
//
// Every request ends with exactly one Outcome, delivered to the Observer
// after the response has been handed to the client connection. An admitted
// request holds its permit until then, on every path.
//
// Two other protocols share the listener and the admission. An Upgrade
// request (WebSocket) is admitted and forwarded on a connection of its
// own; at the upstream's 101 its permit is released, its Outcome
// reported, and the connection relayed both ways, bounded by
// Config.MaxUpgraded (upgrade.go). A connection that opens with the HTTP/2
// preface goes to the HTTP/2 relay of internal/h2c, where each stream is
// admitted and reported like a request; a gRPC call holds its permit
// until the upstream's response headers.
package proxy
