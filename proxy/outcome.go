package proxy

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
	RejectedQueueFull                // fixed mode, queue full: 503
	RejectedQueueTimeout             // fixed mode, waited QueueTimeout: 503
	RejectedBulkhead                 // unbounded mode, bulkhead full: 503
	RejectedMemory                   // in-flight memory budget full: 503
	RejectedUpgraded                 // MaxUpgraded upgraded connections open: 503
	ClientClosed                     // the client left before its response was written, or inside its request
	ClientTimeout                    // the client stalled sending its request (408) or reading its response
	BadRequest                       // malformed or too large: 400, 413, 431
	InternalError                    // a bug in the proxy, recovered: 500
	numKinds
)

var kindNames = [numKinds]string{
	"ok", "upstream_error", "upstream_timeout",
	"rejected_queue_full", "rejected_queue_timeout", "rejected_bulkhead", "rejected_memory",
	"rejected_upgraded",
	"client_closed", "client_timeout", "bad_request", "internal_error",
}

// kindValues are kindNames as header values, made once.
var kindValues = func() (v [numKinds][]byte) {
	for i, name := range kindNames {
		v[i] = []byte(name)
	}
	return v
}()

// Rejection reports whether k is admission's refusal, answered with
// RejectStatus and Retry-After.
func (k Kind) Rejection() bool {
	return k >= RejectedQueueFull && k <= RejectedUpgraded
}

// String returns the kind as the metrics label and access log write it.
func (k Kind) String() string {
	if k < numKinds {
		return kindNames[k]
	}
	return "unknown"
}

// Kinds lists every Kind, for observers that pre-create one series each.
func Kinds() []Kind {
	ks := make([]Kind, numKinds)
	for i := range ks {
		ks[i] = Kind(i)
	}
	return ks
}

// StatusClientClosed is the status recorded, never sent, for a request whose
// client left first; nginx's 499, which operators already know.
const StatusClientClosed = 499

// Outcome is what happened to one request. The proxy reuses Outcomes:
// an Observer must copy what it keeps beyond its Observe call.
type Outcome struct {
	Kind Kind
	// Status is the status code written to the client, or StatusClientClosed.
	Status int
	// UpstreamStatus is the upstream's status code, 0 if it did not answer.
	UpstreamStatus int
	// Admission is set when the request reached the Admitter, admitted or
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
	// Bytes is what the request reserved from the Admitter.
	Bytes int64
	// Method and Target are the request line's method and target, and
	// Remote the client's address; valid only during Observe.
	Method, Target []byte
	Remote         net.Addr
}

// Observer receives each request's Outcome once, after its response.
// Observe is called concurrently and on the request's path: it must be quick.
type Observer interface {
	Observe(*Outcome)
}
