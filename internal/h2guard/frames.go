package h2guard

import "encoding/binary"

// Frame types, flags and settings of RFC 9113 that the guard reads or
// writes.
const (
	frameData         = 0x0
	frameHeaders      = 0x1
	frameRSTStream    = 0x3
	frameSettings     = 0x4
	frameGoAway       = 0x7
	frameWindowUpdate = 0x8
	frameContinuation = 0x9

	flagEndStream  = 0x1
	flagAck        = 0x1
	flagEndHeaders = 0x4
	flagPadded     = 0x8
	flagPriority   = 0x20

	settingInitialWindowSize = 0x4

	// errEnhanceYourCalm is GOAWAY's code for a peer "exhibiting a
	// behavior that might be generating excessive load" (RFC 9113, 7).
	errEnhanceYourCalm = 0xb

	headerLen = 9
)

// preface is what a client sends before its first frame (RFC 9113, 3.4).
const preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// appendFrameHeader appends a frame's 9-byte header.
func appendFrameHeader(b []byte, length int, typ, flags byte, stream uint32) []byte {
	return append(b, byte(length>>16), byte(length>>8), byte(length), typ, flags,
		byte(stream>>24)&0x7f, byte(stream>>16), byte(stream>>8), byte(stream))
}

// goAway is a GOAWAY frame: the last stream the server may have acted on,
// the code, and why, in words, as its debug data.
func goAway(last uint32, code uint32, why string) []byte {
	b := appendFrameHeader(make([]byte, 0, headerLen+8+len(why)), 8+len(why), frameGoAway, 0, 0)
	b = binary.BigEndian.AppendUint32(b, last&0x7fffffff)
	b = binary.BigEndian.AppendUint32(b, code)
	return append(b, why...)
}

// appendLiteral appends an HPACK "literal header field without indexing"
// with a new name (RFC 7541, 6.2.2): it leaves both ends' dynamic tables
// as they were, so that it can be added to a block the server's encoder
// wrote, or written beside it, without either end's table drifting. Names
// and values here are short: their lengths fit the 7-bit prefix.
func appendLiteral(b []byte, name, value string) []byte {
	b = append(b, 0x00, byte(len(name)))
	b = append(b, name...)
	b = append(b, byte(len(value)))
	return append(b, value...)
}

// statusOnly is the header block of an answer with no body: its :status
// (a literal without indexing on the static table's :status name, index
// 8) and one more field.
func statusOnly(status string, name, value string) []byte {
	b := append(make([]byte, 0, 4+len(status)+len(name)+len(value)), 0x08, byte(len(status)))
	b = append(b, status...)
	return appendLiteral(b, name, value)
}
