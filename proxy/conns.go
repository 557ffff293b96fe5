package proxy

import (
	"time"
)

// ClientConns is the number of client connections open now.
func (p *Proxy) ClientConns() int64 {
	ln := p.ln.Load()
	if ln == nil {
		return 0
	}
	return ln.Open()
}

// AcceptErrors is the number of failed accepts retried so far (out of
// descriptors, most often).
func (p *Proxy) AcceptErrors() uint64 { return p.acceptErrors.Load() }

// acceptFailed logs a retried accept failure, at most one line every ten
// seconds: under a flood every accept fails.
func (p *Proxy) acceptFailed(err error) {
	now := time.Now().UnixNano()
	last := p.lastAcceptLog.Load()
	if now-last < int64(10*time.Second) || !p.lastAcceptLog.CompareAndSwap(last, now) {
		return
	}
	p.log.Warn("accepting a connection failed; retrying. If out of file descriptors, raise the open-file limit or lower LOOMGATE_MAX_CONNS",
		"err", err, "client_conns", p.ClientConns(), "accept_errors", p.acceptErrors.Load())
}
