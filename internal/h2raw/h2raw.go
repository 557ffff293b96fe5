// Package h2raw is an HTTP/2 client (prior knowledge) whose frames are
// written as the test says, for the tests of what a server does with
// clients that keep the protocol's letter and not its spirit: streams
// reset as they open, windows never granted, header blocks left open. It
// is x/net's Framer with the chores done.
package h2raw

import (
	"bytes"
	"errors"
	"net"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// Conn is a client connection. Frames are buffered until Flush writes them
// at once, in one write: the server reads them as one arrival.
type Conn struct {
	net.Conn
	// Framer writes into the buffer Flush sends, and reads the
	// connection, header blocks decoded.
	Framer *http2.Framer
	enc    *hpack.Encoder
	hb     bytes.Buffer
	buf    bytes.Buffer
}

// Dial connects to addr and buffers the preface and a SETTINGS frame with
// settings.
func Dial(addr string, settings ...http2.Setting) (*Conn, error) {
	return DialFrom(nil, addr, settings...)
}

// DialFrom is Dial from the local address local (nil: any).
func DialFrom(local net.Addr, addr string, settings ...http2.Setting) (*Conn, error) {
	d := net.Dialer{LocalAddr: local, Timeout: 10 * time.Second}
	nc, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	c := &Conn{Conn: nc}
	c.Framer = http2.NewFramer(&c.buf, nc)
	c.Framer.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.Framer.MaxHeaderListSize = 1 << 20
	c.enc = hpack.NewEncoder(&c.hb)
	c.buf.WriteString(http2.ClientPreface)
	if err := c.Framer.WriteSettings(settings...); err != nil {
		nc.Close()
		return nil, err
	}
	return c, nil
}

// Block encodes fields, names and values in turn, with the connection's
// encoder: its dynamic table is the server's decoder's.
func (c *Conn) Block(fields ...string) []byte {
	c.hb.Reset()
	for i := 0; i+1 < len(fields); i += 2 {
		c.enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	return append([]byte(nil), c.hb.Bytes()...)
}

// Request buffers a request on stream id with no body: method and path,
// then the extra fields, names and values in turn.
func (c *Conn) Request(id uint32, method, path string, extra ...string) {
	b := c.Block(append([]string{":method", method, ":scheme", "http", ":authority", "h2raw.test", ":path", path}, extra...)...)
	c.Framer.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: b, EndStream: true, EndHeaders: true})
}

// Get buffers a GET of path on stream id.
func (c *Conn) Get(id uint32, path string, extra ...string) { c.Request(id, "GET", path, extra...) }

// Reset buffers a RST_STREAM (CANCEL) of stream id.
func (c *Conn) Reset(id uint32) { c.Framer.WriteRSTStream(id, http2.ErrCodeCancel) }

// Flush writes what is buffered, in one write.
func (c *Conn) Flush() error {
	c.Conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
	_, err := c.Conn.Write(c.buf.Bytes())
	c.buf.Reset()
	return err
}

// Read is what ReadAll read.
type Read struct {
	// GoAway is the last GOAWAY frame, nil if none came.
	GoAway *http2.GoAwayFrame
	// Headers are the last header block of each stream.
	Headers map[uint32][]hpack.HeaderField
	// Resets are the streams the server reset.
	Resets map[uint32]bool
	// Data is how many body bytes came for each stream.
	Data map[uint32]int
	// Ended is set when the connection ended (rather than the wait).
	Ended bool
}

// ReadAll reads frames until the connection ends or within has passed.
func (c *Conn) ReadAll(within time.Duration) Read {
	r := Read{Headers: map[uint32][]hpack.HeaderField{}, Resets: map[uint32]bool{}, Data: map[uint32]int{}}
	c.SetReadDeadline(time.Now().Add(within))
	for {
		f, err := c.Framer.ReadFrame()
		if err != nil {
			var ne net.Error
			r.Ended = !(errors.As(err, &ne) && ne.Timeout())
			return r
		}
		switch f := f.(type) {
		case *http2.GoAwayFrame:
			r.GoAway = f
		case *http2.MetaHeadersFrame:
			r.Headers[f.StreamID] = f.Fields
		case *http2.RSTStreamFrame:
			r.Resets[f.StreamID] = true
		case *http2.DataFrame:
			r.Data[f.StreamID] += len(f.Data())
		}
	}
}

// Field is the value of the first field named name in fs, "" if none.
func Field(fs []hpack.HeaderField, name string) string {
	for _, f := range fs {
		if f.Name == name {
			return f.Value
		}
	}
	return ""
}
