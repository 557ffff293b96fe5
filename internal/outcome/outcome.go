// Package outcome is the record of one finished request: what the proxy
// produces once per request and every observer (the metrics, the advice's
// window, the adaptive controller, the access log) reads, so that none of
// them keeps a copy of its own or a rule of its own about what it means.
package outcome

import (
	"net"
	"time"
)

// Kind classifies how a request ended.
type Kind uint8

// The kinds, in the order the README's outcome table lists them.
const (
	OK                   Kind = iota // the upstream's response was written to the client
	UpstreamError                    // the upstream was unreachable, reset or spoke bad HTTP: 502
	UpstreamTimeout                  // the upstream exceeded UpstreamTimeout: 504
	DrainTimeout                     // a gRPC call the drain's end cut: UNAVAILABLE
	RejectedQueueFull                // fixed mode, queue full: 503
	RejectedQueueTimeout             // fixed mode, waited QueueTimeout: 503
	RejectedBulkhead                 // unbounded mode, bulkhead full: 503
	RejectedMemory                   // in-flight memory budget full: 503
	RejectedUpgraded                 // MaxUpgraded upgraded connections open: 503
	ClientClosed                     // the client left before its response was written, or inside its request
	ClientTimeout                    // the client stalled sending its request (408) or reading its response
	ClientReset                      // HTTP/2: the client reset the stream before it was admitted; never forwarded
	BadRequest                       // malformed or too large: 400, 413, 431
	InternalError                    // a bug in the proxy, recovered: 500; or no descriptor left to dial: 503

	// NumKinds is the number of kinds: an observer keeps an array of that
	// many counters and indexes it by Kind.
	NumKinds = iota
)

var kindNames = [NumKinds]string{
	"ok", "upstream_error", "upstream_timeout", "drain_timeout",
	"rejected_queue_full", "rejected_queue_timeout", "rejected_bulkhead", "rejected_memory",
	"rejected_upgraded",
	"client_closed", "client_timeout", "client_reset", "bad_request", "internal_error",
}

// Rejection reports whether k is admission's refusal, answered with
// RejectStatus and Retry-After.
func (k Kind) Rejection() bool {
	return k >= RejectedQueueFull && k <= RejectedUpgraded
}

// String returns the kind as the metrics label and access log write it.
func (k Kind) String() string {
	if k < NumKinds {
		return kindNames[k]
	}
	return "unknown"
}

// Kinds lists every Kind, for observers that pre-create one series each.
func Kinds() []Kind {
	ks := make([]Kind, NumKinds)
	for i := range ks {
		ks[i] = Kind(i)
	}
	return ks
}

// StatusClientClosed is the status recorded, never sent, for a request whose
// client left first; nginx's 499, which operators already know.
const StatusClientClosed = 499

// Record is what happened to one request. The proxy reuses Records: an
// observer must copy what it keeps beyond the call that hands it one.
type Record struct {
	Kind Kind
	// Class is the request's route class, an index of the route classes
	// the proxy sorts requests into (route.Classes): set once, as the
	// request met admission (Admission), and read from here by whatever
	// keeps figures by route.
	Class int
	// Level is the request's priority level (a limiter.Level: 0
	// sheddable to 3 critical), set as it met admission when priorities
	// are configured; 0 otherwise, and then read by nothing.
	Level uint8
	// Status is the status code written to the client, or StatusClientClosed.
	Status int
	// UpstreamStatus is the upstream's status code, 0 if it did not answer.
	UpstreamStatus int
	// Admission is set when the request met the admission policy, admitted or
	// not; a request refused before (a bad request) has no queue wait.
	Admission bool
	// Admitted is set when the request was admitted and went upstream.
	Admitted bool
	// Queue is the wait for admission: from the request being read to
	// admission (or rejection).
	Queue time.Duration
	// Service is from admission to the upstream's last response byte; 0 for
	// a request that was not admitted.
	Service time.Duration
	// Total is from the request being read to its response being written.
	Total time.Duration
	// End is when the request ended (its response written, or its end
	// found): the clock reading Total was measured with, which an observer
	// that needs the time of day takes rather than reading the clock again.
	// Zero when the producer did not read it.
	End time.Time
	// Bytes is what the request reserved from the admission policy.
	Bytes int64
	// Method and Target are the request line's method and target, and
	// Remote the client's address; valid only during the call.
	Method, Target []byte
	Remote         net.Addr
	// UpstreamErr is why the upstream did not deliver the response, for
	// an UpstreamError or an UpstreamTimeout; nil otherwise. An observer
	// may keep it: the error is the request's, not reused.
	UpstreamErr error
}

// Answered reports whether the upstream answered the request in full,
// below 500: only those service times say what the work costs (a 5xx may be
// a failure that came back at once, or a timeout inside the upstream), and
// only those tell the advice and the adaptive controller how the upstream
// serves.
func (r *Record) Answered() bool {
	return r.Kind == OK && r.UpstreamStatus > 0 && r.UpstreamStatus < 500
}
