package h2guard

import "encoding/binary"

// maxMarked is the largest HEADERS frame the writer holds back to add the
// outcome field to: the server's own answers are a few dozen bytes.
const maxMarked = 4 << 10

// outbound reads the server's frames as they pass to the client. A frame
// is let through as it is, except the HEADERS frame of an answer the
// server gives on its own, which is held until whole, and sent on with the
// outcome field added; and the bytes of a frame header that one write cuts
// short, held until the next tells what the frame is.
type outbound struct {
	hdr  [headerLen]byte
	hn   int
	left uint32
	// marking is set while the current frame is held to be marked, with
	// the answer it carries.
	marking bool
	answer  Answer
	held    []byte
}

// atBoundary reports whether the next byte the server writes begins a
// frame, and nothing is held.
func (o *outbound) atBoundary() bool { return o.hn == 0 && len(o.held) == 0 }

// writeBuf builds what goes out for one of the server's writes: p itself
// as long as nothing in it is held or changed, else a copy.
type writeBuf struct {
	p      []byte
	w      []byte
	copied bool
	next   int // p[:next] is placed
}

func (b *writeBuf) copy() {
	if !b.copied {
		b.w = append(b.w[:0], b.p[:b.next]...)
		b.copied = true
	}
}

// emit lets p[next:to] out.
func (b *writeBuf) emit(to int) {
	if b.copied {
		b.w = append(b.w, b.p[b.next:to]...)
	}
	b.next = to
}

// hold keeps p[next:to] back in held.
func (b *writeBuf) hold(to int, held *[]byte) {
	b.copy()
	*held = append(*held, b.p[b.next:to]...)
	b.next = to
}

// emitBytes lets x out.
func (b *writeBuf) emitBytes(x []byte) {
	b.copy()
	b.w = append(b.w, x...)
}

func (b *writeBuf) result() []byte {
	if b.copied {
		return b.w
	}
	return b.p[:b.next]
}

// pass reads the frames in p and returns what is to be written for it.
func (o *outbound) pass(c *Conn, p []byte) []byte {
	b := writeBuf{p: p, w: c.wbuf}
	for i := 0; i < len(p); {
		if o.hn < headerLen {
			k := copy(o.hdr[o.hn:], p[i:])
			o.hn += k
			i += k
			if o.hn < headerLen {
				b.hold(i, &o.held)
				break
			}
			o.frameStart(c)
			if o.marking {
				b.hold(i, &o.held)
			} else {
				if len(o.held) > 0 {
					b.emitBytes(o.held)
					o.held = o.held[:0]
				}
				b.emit(i)
			}
			if o.left == 0 {
				o.frameEnd(c, &b)
			}
			continue
		}
		k := min(uint32(len(p)-i), o.left)
		i += int(k)
		o.left -= k
		if o.marking {
			b.hold(i, &o.held)
		} else {
			b.emit(i)
		}
		if o.left == 0 {
			o.frameEnd(c, &b)
		}
	}
	if b.copied {
		c.wbuf = b.w[:0]
	}
	return b.result()
}

func (o *outbound) frameStart(c *Conn) {
	h := o.hdr[:]
	o.left = uint32(h[0])<<16 | uint32(h[1])<<8 | uint32(h[2])
	typ, flags := h[3], h[4]
	id := binary.BigEndian.Uint32(h[5:]) & 0x7fffffff
	switch typ {
	case frameData:
		if o.left > 0 {
			c.progress.Add(1)
		}
	case frameHeaders:
		a, own := c.answering(id)
		if !own {
			return
		}
		if flags&(flagEndHeaders|flagPadded|flagPriority) == flagEndHeaders && o.left <= maxMarked && c.cfg.OutcomeHeader != "" {
			o.marking, o.answer = true, a
			return
		}
		// Not one the writer can mark: counted all the same.
		if f := c.cfg.Answered; f != nil {
			f(c, a)
		}
	case frameRSTStream:
		c.serverReset(id)
	}
}

// frameEnd ends the current frame; one held to be marked goes out with
// the outcome field at the end of its block.
func (o *outbound) frameEnd(c *Conn, b *writeBuf) {
	o.hn = 0
	if !o.marking {
		return
	}
	o.marking = false
	f := appendLiteral(o.held, c.cfg.OutcomeHeader, c.cfg.OwnOutcome)
	n := len(f) - headerLen
	f[0], f[1], f[2] = byte(n>>16), byte(n>>8), byte(n)
	b.emitBytes(f)
	o.held = f[:0]
	if fn := c.cfg.Answered; fn != nil {
		fn(c, o.answer)
	}
}
