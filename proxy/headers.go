package proxy

import (
	"bytes"
	"net"
	"net/netip"
	"strconv"
	"strings"

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
	headerAllow          = []byte("Allow")
	// headerOutcome is on every answer the proxy makes itself, with the
	// outcome label value: the README documents it as a contract.
	headerOutcome = []byte("Loomgate-Outcome")
	valueAllow    = []byte("GET, HEAD, POST, PUT, DELETE, OPTIONS, PATCH, TRACE")
	valueHTTP     = []byte("http")
)

// header is what RequestHeader and ResponseHeader have in common here.
type header interface {
	PeekAll(key string) [][]byte
	Del(key string)
	DelBytes(key []byte)
}

// Header fields that requestFields and responseFields report, so that
// the work on a field that is absent, as they mostly are, is skipped.
const (
	fieldHop    = 1 << iota // one of hopHeaders
	fieldExpect             // Expect
)

// requestFields reports which of the fields the proxy rewrites h has, in
// one pass over it: a Del costs a pass of its own, and most requests carry
// none of them. One function per header type, not one on the header
// interface: through an interface, All's iterator escapes and allocates.
func requestFields(h *fasthttp.RequestHeader) (fields int) {
	for k := range h.All() {
		fields |= fieldOf(k)
	}
	return fields
}

// responseFields is requestFields for a response.
func responseFields(h *fasthttp.ResponseHeader) (fields int) {
	for k := range h.All() {
		fields |= fieldOf(k)
	}
	return fields
}

// fieldOf classifies one field name.
func fieldOf(k []byte) int {
	// The length sorts out nearly every field before a comparison.
	switch len(k) {
	case 2, 7, 10, 16, 18, 19:
		if isHopHeader(k) {
			return fieldHop
		}
	case len("Expect"):
		if bytes.EqualFold(k, headerExpect) {
			return fieldExpect
		}
	}
	return 0
}

func isHopHeader(k []byte) bool {
	for _, name := range hopHeaders {
		if len(name) == len(k) && bytes.EqualFold(k, []byte(name)) {
			return true
		}
	}
	return false
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
		// A sender may not make a proxy drop the framing or the target of
		// a message: naming them in Connection is invalid (RFC 9110,
		// section 7.6.1), and obeying would let a client forge a broken
		// request and an upstream error at will.
		if endToEnd(name) {
			continue
		}
		h.DelBytes(name)
	}
	for _, name := range hopHeaders {
		h.Del(name)
	}
	return names
}

// endToEnd reports whether a header named in Connection must be kept all
// the same: the message's framing and its Host.
func endToEnd(name []byte) bool {
	return bytes.EqualFold(name, []byte("Content-Length")) ||
		bytes.EqualFold(name, []byte("Transfer-Encoding")) ||
		bytes.EqualFold(name, []byte("Host"))
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

// tchar marks the bytes of a token (RFC 9110, section 5.6.2), which is
// what a field name must be.
var tchar = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c], t[c-'a'+'A'] = true, true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()

// validFields reports whether a raw header block (fasthttp's RawHeaders:
// "Name: value\r\n" lines) is one a proxy may forward, where fasthttp is
// more lenient:
//   - every field name is a token: fasthttp accepts a name such as "X A"
//     and would forward it, an upstream may read it as something else,
//     and RFC 9112 (section 5) has a server answer 400;
//   - not both Content-Length and Transfer-Encoding: the classic request
//     smuggling pair, which RFC 9112 (section 6.3) says ought to be an
//     error; fasthttp would forward the chunked body.
//
// Lines that continue the previous one (obs-fold) carry no name: fasthttp
// joins them into the value with a space, as RFC 9112 allows.
func validFields(raw []byte) bool {
	var length, coding bool
	for len(raw) > 0 {
		line := raw
		if i := bytes.IndexByte(raw, '\n'); i >= 0 {
			line, raw = raw[:i], raw[i+1:]
		} else {
			raw = nil
		}
		line = bytes.TrimSuffix(line, []byte{'\r'})
		if len(line) == 0 {
			break // the blank line that ends the block
		}
		if line[0] == ' ' || line[0] == '\t' {
			continue
		}
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 {
			return false
		}
		name := line[:colon]
		for _, c := range name {
			if !tchar[c] {
				return false
			}
		}
		length = length || bytes.EqualFold(name, []byte("Content-Length"))
		coding = coding || bytes.EqualFold(name, []byte("Transfer-Encoding"))
	}
	return !(length && coding)
}

// validVersion reports whether a request's protocol is HTTP/1.x. fasthttp
// passes "HTTP/2.0" on, and the upstream would be asked to speak a version
// the client does not speak on this connection: 505 (RFC 9110, 15.6.6).
// A higher minor version of 1 is read as 1.1 (RFC 9112, section 2.3).
func validVersion(proto []byte) bool {
	return len(proto) == 8 && bytes.HasPrefix(proto, []byte("HTTP/1.")) && proto[7] >= '0' && proto[7] <= '9'
}

// absoluteAuthority returns the authority of an absolute-form request
// target ("http://host:port/path?query"), as it was sent, and whether the
// target has that form.
func absoluteAuthority(target []byte) (authority []byte, ok bool) {
	i := bytes.Index(target, []byte("://"))
	if i <= 0 {
		return nil, false
	}
	rest := target[i+3:]
	end := bytes.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	return rest[:end], true
}

// validAuthority reports whether an absolute-form target's authority is
// one to forward: not empty, and without userinfo, which RFC 9110 (4.2.4)
// has a recipient treat as an error and fasthttp would turn into an
// Authorization header of loomgate's making.
func validAuthority(authority []byte) bool {
	return len(authority) > 0 && bytes.IndexByte(authority, '@') < 0
}

// bareLFBlock reports whether the header read that err ended (fasthttp's
// "error when reading request headers: ...: contents: %q", or "%q...%q"
// for the first and last 200 bytes of a longer buffer) had received a
// complete header block whose lines end in a bare LF: a line end followed
// by an empty line, one of the two without its CR. fasthttp has no error
// value for this and keeps the buffer to itself; the text is pinned by a
// test.
func bareLFBlock(err error) bool {
	text := err.Error()
	i := strings.LastIndex(text, "contents: ")
	if i < 0 {
		return false
	}
	quoted := text[i+len("contents: "):]
	var buf []byte
	for quoted != "" {
		q, qerr := strconv.QuotedPrefix(quoted)
		if qerr != nil {
			return false
		}
		part, _ := strconv.Unquote(q)
		if buf != nil {
			buf = append(buf, 0) // the bytes left out, which join no lines
		}
		buf = append(buf, part...)
		quoted = strings.TrimPrefix(quoted[len(q):], "...")
	}
	for i, c := range buf {
		if c != '\n' || i+1 >= len(buf) {
			continue
		}
		bareEnd := i == 0 || buf[i-1] != '\r'
		switch {
		case buf[i+1] == '\n':
			return true
		case bareEnd && buf[i+1] == '\r' && i+2 < len(buf) && buf[i+2] == '\n':
			return true
		}
	}
	return false
}
