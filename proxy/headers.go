package proxy

import (
	"bytes"
	"net"
	"net/netip"

	"github.com/valyala/fasthttp"
)

// hopHeaders apply to one connection only and are removed in both directions
// (RFC 9110, section 7.6.1; the same list as net/http/httputil).
// Transfer-Encoding is absent: fasthttp owns framing and never stores it as a
// plain header.
var hopHeaders = []string{
	"Connection",
	"Proxy-Connection", // non-standard, sent by some old clients
	"Keep-Alive",
	"Proxy-Authenticate",
	"Proxy-Authorization",
	"Te",
	"Trailer",
	"Upgrade",
}

var (
	headerConnection     = []byte("Connection")
	headerXForwardedFor  = []byte("X-Forwarded-For")
	headerXForwardedHost = []byte("X-Forwarded-Host")
	headerXForwardedProt = []byte("X-Forwarded-Proto")
	headerServerTiming   = []byte("Server-Timing")
	headerRetryAfter     = []byte("Retry-After")
	headerExpect         = []byte("Expect")
	valueHTTP            = []byte("http")
)

// header is what RequestHeader and ResponseHeader have in common here.
type header interface {
	PeekAll(key string) [][]byte
	Del(key string)
	DelBytes(key []byte)
}

// removeHopHeaders deletes the hop-by-hop headers and every header named in
// Connection. names is scratch space, returned for reuse.
func removeHopHeaders(h header, names [][]byte) [][]byte {
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
		h.DelBytes(name)
	}
	for _, name := range hopHeaders {
		h.Del(name)
	}
	return names
}

// setForwarded appends the client to X-Forwarded-For and records the scheme
// and host the client used. buf is scratch space, returned for reuse.
func setForwarded(h *fasthttp.RequestHeader, remote net.Addr, buf []byte) []byte {
	buf = buf[:0]
	// Several X-Forwarded-For lines are one list (RFC 9110, section 5.3).
	for _, v := range h.PeekAll("X-Forwarded-For") {
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
	h.DelBytes(headerXForwardedFor)
	if len(buf) > 0 {
		h.SetBytesKV(headerXForwardedFor, buf)
	}
	h.SetBytesKV(headerXForwardedProt, valueHTTP)
	if host := h.Host(); len(host) > 0 {
		h.SetBytesKV(headerXForwardedHost, host)
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
