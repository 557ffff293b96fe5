package proxy

import (
	"bytes"
	"net"
	"net/netip"

	"github.com/valyala/fasthttp"

	"github.com/loomgate/loomgate/internal/header"
)

var (
	headerConnection     = []byte("Connection")
	headerXForwardedFor  = []byte("X-Forwarded-For")
	headerXForwardedHost = []byte("X-Forwarded-Host")
	headerXForwardedProt = []byte("X-Forwarded-Proto")
	headerServerTiming   = []byte("Server-Timing")
	headerRetryAfter     = []byte("Retry-After")
	headerExpect         = []byte("Expect")
	headerAllow          = []byte("Allow")
	// headerOutcome is on every answer the proxy makes itself, with the
	// outcome label value: the README documents it as a contract.
	headerOutcome = []byte("Loomgate-Outcome")
	valueAllow    = []byte("GET, HEAD, POST, PUT, DELETE, OPTIONS, PATCH, TRACE")
	valueHTTP     = []byte("http")
)

// editable is what RequestHeader and ResponseHeader have in common here.
type editable interface {
	PeekAll(key string) [][]byte
	Del(key string)
	DelBytes(key []byte)
}

// responseFields reports which of the fields the proxy rewrites h has, in
// one pass over it: a Del costs a pass of its own, and most responses
// carry none of them. (A request's come from header.Scan, in the pass
// that checks them.)
func responseFields(h *fasthttp.ResponseHeader) (fields header.Fields) {
	for k := range h.All() {
		fields |= header.Of(k)
	}
	return fields
}

// removeHopHeaders deletes the hop-by-hop headers and every header named in
// Connection. names is scratch space, returned for reuse.
func removeHopHeaders(h editable, names [][]byte) [][]byte {
	names = names[:0]
	// PeekAll's result is only valid until the header changes, so the
	// tokens are copied out before anything is deleted.
	for _, v := range h.PeekAll("Connection") {
		for len(v) > 0 {
			var tok []byte
			tok, v, _ = bytes.Cut(v, []byte{','})
			tok = bytes.TrimSpace(tok)
			if len(tok) == 0 {
				continue
			}
			if len(names) < cap(names) {
				names = names[:len(names)+1]
				names[len(names)-1] = append(names[len(names)-1][:0], tok...)
			} else {
				names = append(names, append([]byte(nil), tok...))
			}
		}
	}
	for _, name := range names {
		if header.EndToEnd(name) {
			continue
		}
		h.DelBytes(name)
	}
	for _, name := range header.Hop {
		h.Del(name)
	}
	return names
}

// setForwarded appends the client to X-Forwarded-For and records the scheme
// and host the client used. buf is scratch space, returned for reuse.
func setForwarded(h *fasthttp.RequestHeader, remote net.Addr, buf []byte) []byte {
	buf = buf[:0]
	// Several X-Forwarded-For lines are one list (RFC 9110, section 5.3).
	existing := h.PeekAll("X-Forwarded-For")
	for _, v := range existing {
		if len(buf) > 0 {
			buf = append(buf, ", "...)
		}
		buf = append(buf, v...)
	}
	if ip, ok := remoteIP(remote); ok {
		if len(buf) > 0 {
			buf = append(buf, ", "...)
		}
		buf = ip.AppendTo(buf)
	}
	if len(existing) > 1 {
		// Set replaces the first line only.
		h.DelBytes(headerXForwardedFor)
	}
	// The names are canonical already: SetCanonical skips normalizing them.
	if len(buf) > 0 {
		h.SetCanonical(headerXForwardedFor, buf)
	}
	h.SetCanonical(headerXForwardedProt, valueHTTP)
	if host := h.Host(); len(host) > 0 {
		h.SetCanonical(headerXForwardedHost, host)
	}
	return buf
}

// remoteIP extracts the address without allocating, where net.IP.String
// would.
func remoteIP(a net.Addr) (netip.Addr, bool) {
	var ip net.IP
	switch a := a.(type) {
	case *net.TCPAddr:
		ip = a.IP
	case *net.UDPAddr:
		ip = a.IP
	default:
		return netip.Addr{}, false
	}
	addr, ok := netip.AddrFromSlice(ip)
	return addr.Unmap(), ok
}

// isUpgrade reports whether a request asks to switch protocols: Connection
// names upgrade and Upgrade names a protocol. An upgrade to h2c is not
// one: its HTTP/2 streams would pass the tunnel unadmitted, so such a
// request goes as a plain HTTP/1.1 request (Upgrade is hop-by-hop), as
// RFC 9113 lets a server answer it; h2c clients use prior knowledge.
func isUpgrade(h *fasthttp.RequestHeader) bool {
	if !h.ConnectionUpgrade() {
		return false
	}
	v := h.Peek(fasthttp.HeaderUpgrade)
	return len(v) > 0 && !hasToken(v, "h2c")
}

// hasToken reports whether a comma-separated list has tok, in any case.
func hasToken(list []byte, tok string) bool {
	for len(list) > 0 {
		var t []byte
		t, list, _ = bytes.Cut(list, []byte{','})
		if bytes.EqualFold(bytes.TrimSpace(t), []byte(tok)) {
			return true
		}
	}
	return false
}
