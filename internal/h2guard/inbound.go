package h2guard

import (
	"encoding/binary"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2/hpack"
)

// inbound reads the client's frames as they pass to the server. Its header
// blocks are decoded as the server decodes them, with the same table and
// limits, to know which streams the server will answer itself: it hands
// those to no handler, and its answer carries nothing of the user's.
type inbound struct {
	c       *Conn
	preface int // preface bytes still to pass

	hdr   [headerLen]byte
	hn    int    // bytes of the current frame's header seen; 9 in its payload
	left  uint32 // payload bytes still to pass
	pos   uint32 // payload bytes passed
	typ   byte
	flags byte
	id    uint32
	// A HEADERS frame's block fragment lies between its pad length and
	// priority fields and its padding.
	fragFrom, fragTo uint32
	// A SETTINGS frame's entry being read.
	setting [6]byte
	sn      int

	dec    *hpack.Decoder
	broken bool // the decoder failed: the server ends the connection
	inBlk  bool // a header block is open
	blk    block
	// watched is set once the open block's timer is armed.
	watched bool
}

// block is a header block being read, and what the server will make of
// it.
type block struct {
	stream uint32
	start  time.Time
	fresh  bool // it opens a stream (not trailers)
	remain uint32
	// As the server's decoder has them: a field it refuses stops the rest
	// (the stream is then reset), one past MaxHeaderListSize truncates
	// the block (the server answers 431).
	invalid, truncated, sawRegular bool
	method, path                   string
	// forbidden is set by a field HTTP/2 forbids (RFC 9113, 8.2.2): the
	// server answers 400.
	forbidden bool
	te        int
}

func (in *inbound) init(c *Conn) {
	in.c = c
	// The server's decoder: net/http's table size, 4096 unless set.
	in.dec = hpack.NewDecoder(4096, in.field)
	in.dec.SetMaxStringLength(int(c.cfg.MaxHeaderListSize))
}

// atBoundary reports whether the next byte is a frame's first.
func (in *inbound) atBoundary() bool { return in.preface == 0 && in.hn == 0 }

// blockOpen reports whether a header block is open after the bytes read,
// and not watched yet.
func (in *inbound) blockOpen() bool { return in.inBlk && !in.watched }

// inspect reads the frames in b, the bytes after those read so far.
func (in *inbound) inspect(b []byte) {
	for len(b) > 0 {
		if in.preface > 0 {
			k := min(in.preface, len(b))
			in.preface -= k
			b = b[k:]
			continue
		}
		if in.hn < headerLen {
			k := copy(in.hdr[in.hn:], b)
			in.hn += k
			b = b[k:]
			if in.hn == headerLen {
				in.frameStart()
				if in.left == 0 {
					in.frameEnd()
				}
			}
			continue
		}
		k := min(uint32(len(b)), in.left)
		in.payload(b[:k])
		in.left -= k
		in.pos += k
		b = b[k:]
		if in.left == 0 {
			in.frameEnd()
		}
	}
}

func (in *inbound) frameStart() {
	h := in.hdr[:]
	in.left = uint32(h[0])<<16 | uint32(h[1])<<8 | uint32(h[2])
	in.typ, in.flags = h[3], h[4]
	in.id = binary.BigEndian.Uint32(h[5:]) & 0x7fffffff
	in.pos, in.sn = 0, 0
	switch in.typ {
	case frameHeaders:
		fresh := in.id%2 == 1 && in.id > in.c.maxStream.Load()
		if fresh {
			in.c.opened(in.id)
		}
		in.fragFrom, in.fragTo = 0, in.left
		if in.flags&flagPadded != 0 {
			in.fragFrom++ // the pad length; the padding is known once read
		}
		if in.flags&flagPriority != 0 {
			in.fragFrom += 5
		}
		in.startBlock(fresh)
	case frameContinuation:
		in.fragFrom, in.fragTo = 0, in.left
	}
}

func (in *inbound) payload(b []byte) {
	switch in.typ {
	case frameHeaders, frameContinuation:
		if in.typ == frameHeaders && in.flags&flagPadded != 0 && in.pos == 0 {
			pad := uint32(b[0])
			if pad+in.fragFrom > in.fragTo {
				in.broken = true // the server refuses the frame
				return
			}
			in.fragTo -= pad
		}
		from, to := max(in.fragFrom, in.pos), min(in.fragTo, in.pos+uint32(len(b)))
		if from < to && in.inBlk && !in.broken {
			if _, err := in.dec.Write(b[from-in.pos : to-in.pos]); err != nil {
				in.broken = true
			}
		}
	case frameSettings:
		if in.flags&flagAck != 0 {
			return
		}
		for _, x := range b {
			in.setting[in.sn] = x
			in.sn++
			if in.sn == len(in.setting) {
				in.sn = 0
				id := binary.BigEndian.Uint16(in.setting[:])
				if id == settingInitialWindowSize && binary.BigEndian.Uint32(in.setting[2:]) > 0 {
					in.c.progress.Add(1)
				}
			}
		}
	}
}

func (in *inbound) frameEnd() {
	in.hn = 0
	switch in.typ {
	case frameHeaders, frameContinuation:
		if in.flags&flagEndHeaders != 0 {
			in.endBlock()
		}
	case frameRSTStream:
		in.c.clientReset(in.id)
	case frameWindowUpdate:
		// A window granted is no DATA written, but may let some go:
		// the next look at the stall will tell.
	}
}

// startBlock begins a header block, as the server's decoder does.
func (in *inbound) startBlock(fresh bool) {
	in.inBlk = true
	in.dec.SetEmitEnabled(true)
	in.blk = block{stream: in.id, fresh: fresh, start: time.Now(), remain: in.c.cfg.MaxHeaderListSize}
}

// endBlock ends a header block, and notes the stream if the server will
// answer it itself. The server resets a stream whose fields it refuses or
// whose pseudo-header fields are wrong: those get no answer, and the
// server's RST_STREAM on them takes the note back.
func (in *inbound) endBlock() {
	in.inBlk = false
	if in.watched {
		in.watched = false
		in.c.blockEnded()
	}
	if in.broken {
		return
	}
	if err := in.dec.Close(); err != nil {
		in.broken = true
		return
	}
	b := &in.blk
	if !b.fresh || b.invalid || b.method == "" {
		return
	}
	status := 0
	switch {
	case b.truncated:
		status = 431
	case b.forbidden:
		status = 400
	}
	if status != 0 {
		in.c.ownAnswer(b.stream, Answer{Status: status, Method: b.method, Path: b.path, Start: b.start})
	}
}

// stop stops the decoder's reports for the rest of the block, as the
// server's decoder stops: it decodes what its table needs, and no more
// (a literal it would not report is left undecoded, and its errors
// unseen).
func (in *inbound) stop() { in.dec.SetEmitEnabled(false) }

// field is the decoder's report of one field, read as net/http's reader
// reads it (its readMetaFrame).
func (in *inbound) field(f hpack.HeaderField) {
	b := &in.blk
	if !httpguts.ValidHeaderFieldValue(f.Value) {
		b.invalid = true
	}
	if strings.HasPrefix(f.Name, ":") {
		if b.sawRegular {
			b.invalid = true
		}
	} else {
		b.sawRegular = true
		if !validWireName(f.Name) {
			b.invalid = true
		}
	}
	if b.invalid {
		in.stop()
		return
	}
	size := f.Size()
	if size > b.remain {
		b.truncated = true
		in.stop()
		return
	}
	b.remain -= size
	switch f.Name {
	case ":method":
		b.method = f.Value
	case ":path":
		b.path = f.Value
	case "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade":
		// net/http's checkValidHTTP2RequestHeaders.
		b.forbidden = true
	case "te":
		b.te++
		if b.te > 1 || f.Value != "trailers" && f.Value != "" {
			b.forbidden = true
		}
	}
}

// validWireName is net/http's validWireHeaderFieldName: a token, in lower
// case.
func validWireName(v string) bool {
	if v == "" {
		return false
	}
	for _, r := range v {
		if !httpguts.IsTokenRune(r) || 'A' <= r && r <= 'Z' {
			return false
		}
	}
	return true
}
