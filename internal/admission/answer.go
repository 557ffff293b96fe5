package admission

import (
	"time"

	"github.com/loomgate/loomgate/internal/outcome"
)

// OutcomeHeader is on every answer the proxy makes itself, naming its
// outcome (Kind.String()), whatever the protocol: the README documents it
// as a contract, so that a client's retry policy can tell a loomgate 503
// from the upstream's own.
const OutcomeHeader = "Loomgate-Outcome"

// TextPlain is the content type of the proxy's own answers.
const TextPlain = "text/plain; charset=utf-8"

// answers are what the proxy says in its own answers, by the kind of
// ending they answer, on every protocol: short, plain and free of internal
// error text, which could leak addresses or versions.
var answers = [outcome.NumKinds]struct {
	status int
	msg    string
}{
	outcome.RejectedQueueFull:    {503, "overloaded: queue full\n"},
	outcome.RejectedQueueTimeout: {503, "overloaded: queue wait timed out\n"},
	outcome.RejectedBulkhead:     {503, "overloaded: bulkhead full\n"},
	outcome.RejectedMemory:       {503, "overloaded: in-flight memory limit reached\n"},
	outcome.RejectedUpgraded:     {503, "overloaded: upgraded connections limit reached\n"},
	// The one bad request every protocol answers alike: a body too large.
	outcome.BadRequest:      {413, "request body too large\n"},
	outcome.ClientClosed:    {outcome.StatusClientClosed, "client closed request\n"},
	outcome.ClientTimeout:   {408, "request timeout: the request was not sent in time\n"},
	outcome.UpstreamError:   {502, "bad gateway: upstream unavailable\n"},
	outcome.UpstreamTimeout: {504, "gateway timeout: upstream too slow\n"},
	outcome.DrainTimeout:    {503, "shutting down: the drain's time is up\n"},
	outcome.InternalError:   {500, "internal error\n"},
}

// Answer is the proxy's own answer to a request that ended as kind: its
// status, a short plain text, and for a rejection its Retry-After in whole
// seconds (0 otherwise). A rejection's status is Config.RejectStatus; a
// client that left is recorded as outcome.StatusClientClosed, and
// whatever a protocol sends it, nobody reads.
func (g *Gate) Answer(kind outcome.Kind) (status int, msg string, retryAfter int64) {
	a := answers[kind]
	if !kind.Rejection() {
		return a.status, a.msg, 0
	}
	retryAfter = 1
	if g.retryAfter != nil {
		retryAfter = max(int64((g.retryAfter(kind)+time.Second-1)/time.Second), 1)
	}
	return g.rejectStatus, a.msg, retryAfter
}
