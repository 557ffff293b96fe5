package proxy

import "github.com/loomgate/loomgate/internal/outcome"

// Outcome is what happened to one request: the one record every observer
// reads (see internal/outcome).
type Outcome = outcome.Record

// Kind classifies how a request ended.
type Kind = outcome.Kind

// The kinds, as the proxy and its callers name them.
const (
	OK                   = outcome.OK
	UpstreamError        = outcome.UpstreamError
	UpstreamTimeout      = outcome.UpstreamTimeout
	DrainTimeout         = outcome.DrainTimeout
	RejectedQueueFull    = outcome.RejectedQueueFull
	RejectedQueueTimeout = outcome.RejectedQueueTimeout
	RejectedBulkhead     = outcome.RejectedBulkhead
	RejectedMemory       = outcome.RejectedMemory
	RejectedUpgraded     = outcome.RejectedUpgraded
	ClientClosed         = outcome.ClientClosed
	ClientTimeout        = outcome.ClientTimeout
	ClientReset          = outcome.ClientReset
	BadRequest           = outcome.BadRequest
	InternalError        = outcome.InternalError
)

// StatusClientClosed is the status recorded, never sent, for a request whose
// client left first; nginx's 499, which operators already know.
const StatusClientClosed = outcome.StatusClientClosed

// Kinds lists every Kind, for observers that pre-create one series each.
func Kinds() []Kind { return outcome.Kinds() }

// kindValues are the kinds' names as header values, made once.
var kindValues = func() (v [outcome.NumKinds][]byte) {
	for i := range v {
		v[i] = []byte(Kind(i).String())
	}
	return v
}()
