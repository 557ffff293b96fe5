// Package header reads a request's header block and line as they arrived,
// where fasthttp is more lenient than a proxy may be: which fields are
// tokens, which framing a request declares, which fields apply to one
// connection only, and what fasthttp's errors say about the bytes it kept.
// It works on bytes and allocates nothing on a request's path.
package header

import (
	"bytes"
	"strconv"
	"strings"
)

// Hop lists the fields that apply to one connection only and are removed in
// both directions (RFC 9110, section 7.6.1; the same list as
// net/http/httputil). Transfer-Encoding is absent: fasthttp owns framing and
// never stores it as a plain field.
var Hop = []string{
	"Connection",
	"Proxy-Connection", // non-standard, sent by some old clients
	"Keep-Alive",
	"Proxy-Authenticate",
	"Proxy-Authorization",
	"Te",
	"Trailer",
	"Upgrade",
}

// Fields says which of the fields a proxy rewrites a header has, so that
// the work on a field that is absent, as they mostly are, is skipped.
type Fields uint8

const (
	HopFields Fields = 1 << iota // one of Hop
	Expect                       // Expect
	// Coding is Transfer-Encoding, which fasthttp reads only as chunked:
	// "identity", which no HTTP/1.1 coding is any more, it takes for none,
	// and a body that follows would be read as the next request.
	Coding
)

var nameExpect = []byte("Expect")

// Of classifies one field name.
func Of(name []byte) Fields {
	// The length sorts out nearly every field before a comparison.
	switch len(name) {
	case 2, 7, 10, 16, 18, 19:
		if IsHop(name) {
			return HopFields
		}
	case len("Expect"):
		if bytes.EqualFold(name, nameExpect) {
			return Expect
		}
	}
	return 0
}

// IsHop reports whether name is one of Hop, in any case.
func IsHop(name []byte) bool {
	for _, h := range Hop {
		if len(h) == len(name) && bytes.EqualFold(name, []byte(h)) {
			return true
		}
	}
	return false
}

// EndToEnd reports whether a field named in Connection must be kept all
// the same: the message's framing and its Host. A sender may not make a
// proxy drop them: naming them in Connection is invalid (RFC 9110, section
// 7.6.1), and obeying would let a client forge a broken request and an
// upstream error at will.
func EndToEnd(name []byte) bool {
	return bytes.EqualFold(name, []byte("Content-Length")) ||
		bytes.EqualFold(name, []byte("Transfer-Encoding")) ||
		bytes.EqualFold(name, []byte("Host"))
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

// Scan reads a raw request header block (fasthttp's RawHeaders: "Name:
// value\r\n" lines) once, and reports which Fields it has and whether it is
// one a proxy may forward, where fasthttp is more lenient:
//   - every field name is a token: fasthttp accepts a name such as "X A"
//     and would forward it, an upstream may read it as something else,
//     and RFC 9112 (section 5) has a server answer 400;
//   - not both Content-Length and Transfer-Encoding: the classic request
//     smuggling pair, which RFC 9112 (section 6.3) says ought to be an
//     error; fasthttp would forward the chunked body.
//
// Lines that continue the previous one (obs-fold) carry no name: fasthttp
// joins them into the value with a space, as RFC 9112 allows.
func Scan(raw []byte) (fields Fields, ok bool) {
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
			return fields, false
		}
		name := line[:colon]
		for _, c := range name {
			if !tchar[c] {
				return fields, false
			}
		}
		switch len(name) {
		case len("Content-Length"):
			length = length || bytes.EqualFold(name, []byte("Content-Length"))
		case len("Transfer-Encoding"):
			if bytes.EqualFold(name, []byte("Transfer-Encoding")) {
				coding = true
				fields |= Coding
			}
		default:
			fields |= Of(name)
		}
	}
	return fields, !(length && coding)
}

// ValidVersion reports whether a request's protocol is HTTP/1.x. fasthttp
// passes "HTTP/2.0" on, and the upstream would be asked to speak a version
// the client does not speak on this connection: 505 (RFC 9110, 15.6.6).
// A higher minor version of 1 is read as 1.1 (RFC 9112, section 2.3).
func ValidVersion(proto []byte) bool {
	return len(proto) == 8 && bytes.HasPrefix(proto, []byte("HTTP/1.")) && proto[7] >= '0' && proto[7] <= '9'
}

// AbsoluteAuthority returns the authority of an absolute-form request
// target ("http://host:port/path?query"), as it was sent, and whether the
// target has that form.
func AbsoluteAuthority(target []byte) (authority []byte, ok bool) {
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

// ValidAuthority reports whether an absolute-form target's authority is
// one to forward: not empty, and without userinfo, which RFC 9110 (4.2.4)
// has a recipient treat as an error and fasthttp would turn into an
// Authorization header of the proxy's making.
func ValidAuthority(authority []byte) bool {
	return len(authority) > 0 && bytes.IndexByte(authority, '@') < 0
}

// BareLFBlock reports whether the header read that err ended (fasthttp's
// "error when reading request headers: ...: contents: %q", or "%q...%q"
// for the first and last 200 bytes of a longer buffer) had received a
// complete header block whose lines end in a bare LF: a line end followed
// by an empty line, one of the two without its CR. fasthttp has no error
// value for this and keeps the buffer to itself; the text is pinned by a
// test of the proxy's.
func BareLFBlock(err error) bool {
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
