package h2c

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/loomgate/loomgate/internal/admission"
	"github.com/loomgate/loomgate/limiter"
)

// The fuzz targets drive the relay with frames as they come, from a
// client (FuzzClientFrames) or from the upstream (FuzzUpstreamFrames),
// through a real relay on loopback in front of a real upstream, and hold
// it, after each input, to what no input may break: no panic, every
// permit, queue place and reserved byte given back, no goroutine of a
// connection or stream left, and nothing malformed at the upstream. Their
// seeds are the attacks of the package's tests, and run with go test.

// fuzzRelay is a relay in front of upstream whose every input gets a
// Server of its own, on a listener the target shares.
type fuzzRelay struct {
	ln  net.Listener
	cur atomic.Pointer[Server]
}

func newFuzzRelay(t testing.TB) *fuzzRelay {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &fuzzRelay{ln: ln}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			if h := r.cur.Load(); h != nil {
				h.Serve(nc)
			} else {
				nc.Close()
			}
		}
	}()
	return r
}

// server starts the input's Server in front of upstream, with a fixed
// pool small enough that streams queue, and timeout its
// UpstreamTimeout; it returns the Server and its limiter.
func (r *fuzzRelay) server(t testing.TB, upstream string, timeout time.Duration) (*Server, *limiter.Limiter) {
	lim, err := limiter.New(limiter.Config{Mode: limiter.Fixed, Workers: 4, QueueSize: 16, QueueTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var d net.Dialer
	h := New(Config{
		Gate:     admission.New(admission.Config{Policy: lim, Reserve: func(n int) int64 { return 4096 + int64(max(n, 0)) }}),
		Upstream: "http://" + upstream, Dial: d.DialContext,
		UpstreamTimeout: timeout, HeaderTimeout: 300 * time.Millisecond, BodyTimeout: 300 * time.Millisecond,
		MaxBodyBytes: 1 << 20, MaxHeaderBytes: 8 << 10, AnswerBytes: 4096,
		Cut: func() bool { return false }, Closed: func() {},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	r.cur.Store(h)
	return h, lim
}

// settle closes the input's Server once its connections are gone, and
// fails unless every stream ended, every permit, place and byte came
// back, and no goroutine of a connection or stream is left.
func settle(t testing.TB, h *Server, lim *limiter.Limiter) {
	deadline := time.Now().Add(5 * time.Second)
	for h.Conns() > 0 || h.Open() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("after 5 s: %d connections, %d streams open", h.Conns(), h.Open())
		}
		time.Sleep(time.Millisecond)
	}
	h.Close()
	for {
		s := lim.Stats()
		left := leftGoroutines()
		if s.InFlight == 0 && s.Queued == 0 && s.Bytes == 0 && left == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 5 s: %+v held; goroutines left:\n%s", s, left)
		}
		time.Sleep(time.Millisecond)
	}
}

// leftGoroutines are the stacks of goroutines running the relay's own
// methods: a connection's reader or writer, a stream's wait.
func leftGoroutines() string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var left []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "internal/h2c.(*") && !strings.Contains(g, "h2c.settle") {
			left = append(left, g)
		}
	}
	return strings.Join(left, "\n\n")
}

// goUpstream is a Go h2c server on loopback that answers every request,
// reading its body first, and counts those that reached it malformed:
// what RFC 9113 calls malformed, and the relay must never forward.
func goUpstream(t testing.TB) (addr string, malformed *atomic.Int64, what *sync.Map) {
	malformed, what = new(atomic.Int64), new(sync.Map)
	protos := new(http.Protocols)
	protos.SetUnencryptedHTTP2(true)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Protocols: protos, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if why := malformedAtUpstream(r); why != "" {
			malformed.Add(1)
			what.Store(why, true)
		}
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, "ok")
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String(), malformed, what
}

// malformedAtUpstream says what of r RFC 9113 calls malformed, "" if
// nothing.
func malformedAtUpstream(r *http.Request) string {
	switch {
	case !httpguts.ValidHeaderFieldName(r.Method):
		return "method " + r.Method
	case r.RequestURI == "*" && r.Method != "OPTIONS", r.RequestURI != "*" && !strings.HasPrefix(r.RequestURI, "/"):
		return "path " + r.RequestURI
	case strings.ContainsAny(r.RequestURI, " \t\r\n"):
		return "path " + r.RequestURI
	case strings.Contains(r.Host, "@") || !httpguts.ValidHostHeader(r.Host):
		return "authority " + r.Host
	}
	for name, vs := range r.Header {
		if h := strings.ToLower(name); h == "connection" || h == "transfer-encoding" || h == "upgrade" || h == "keep-alive" || h == "proxy-connection" {
			return "field " + name
		}
		for _, v := range vs {
			if v != "" && (isSpace(v[0]) || isSpace(v[len(v)-1])) {
				return "value of " + name
			}
		}
	}
	return ""
}

// seedConn builds a client's frames after the preface: each seed its own
// HPACK encoder, as each connection has.
type seedConn struct {
	buf bytes.Buffer
	fr  *http2.Framer
	hb  bytes.Buffer
	enc *hpack.Encoder
}

func newSeed() *seedConn {
	s := &seedConn{}
	s.fr = http2.NewFramer(&s.buf, nil)
	s.fr.AllowIllegalWrites = true
	s.enc = hpack.NewEncoder(&s.hb)
	s.fr.WriteSettings()
	return s
}

func (s *seedConn) headers(id uint32, end bool, fields ...string) {
	s.hb.Reset()
	for i := 0; i+1 < len(fields); i += 2 {
		s.enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	s.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: s.hb.Bytes(), EndStream: end, EndHeaders: true})
}

func (s *seedConn) get(id uint32, path string, extra ...string) {
	s.headers(id, true, append([]string{":method", "GET", ":scheme", "http", ":authority", "fuzz.test", ":path", path}, extra...)...)
}

func (s *seedConn) bytes() []byte { return s.buf.Bytes() }

// clientSeeds are the attacks of the package's and the proxy's tests, in
// frames.
func clientSeeds() [][]byte {
	var seeds [][]byte
	add := func(build func(s *seedConn)) {
		s := newSeed()
		build(s)
		seeds = append(seeds, bytes.Clone(s.bytes()))
	}
	add(func(s *seedConn) { s.get(1, "/") })
	add(func(s *seedConn) {
		s.headers(1, false, ":method", "POST", ":scheme", "http", ":authority", "fuzz.test", ":path", "/up", "content-length", "5")
		s.fr.WriteData(1, false, []byte("hel"))
		s.fr.WriteData(1, true, []byte("lo"))
	})
	// SETTINGS flood with streams open.
	add(func(s *seedConn) {
		for i := range 20 {
			s.get(uint32(2*i+1), "/slow")
		}
		var p []byte
		for i := range 2730 {
			p = binary.BigEndian.AppendUint16(p, uint16(http2.SettingInitialWindowSize))
			p = binary.BigEndian.AppendUint32(p, uint32(65535+(i%2)*(1<<30-65535)))
		}
		s.fr.WriteRawFrame(http2.FrameSettings, 0, 0, p)
	})
	add(func(s *seedConn) {
		s.get(1, "/slow")
		for i := range 150 {
			s.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: uint32(65535 + i%2)})
		}
	})
	// MadeYouReset: streams, then a frame that makes the relay reset each.
	add(func(s *seedConn) {
		for i := range 60 {
			s.get(uint32(2*i+1), "/slow")
		}
		for i := range 60 {
			s.fr.WriteRawFrame(http2.FrameWindowUpdate, 0, uint32(2*i+1), []byte{0, 0, 0, 0})
		}
	})
	add(func(s *seedConn) {
		for i := range 60 {
			id := uint32(2*i + 1)
			s.headers(id, false, ":method", "POST", ":scheme", "http", ":authority", "fuzz.test", ":path", "/up")
			s.fr.WriteWindowUpdate(id, 1<<31-1)
			s.headers(id, false, "x-trailer", "t")
		}
	})
	// Rapid reset.
	add(func(s *seedConn) {
		for i := range 100 {
			s.get(uint32(2*i+1), "/reset")
			s.fr.WriteRSTStream(uint32(2*i+1), http2.ErrCodeCancel)
		}
	})
	// Malformed requests.
	add(func(s *seedConn) {
		base := func(method, path, authority string, extra ...string) []string {
			return append([]string{":method", method, ":scheme", "http", ":authority", authority, ":path", path}, extra...)
		}
		for i, f := range [][]string{
			base("GET", "/a b", "ok"), base("GET", "a/b", "ok"), base("GET", "http://evil/x", "ok"), base("GET", "*", "ok"),
			base("GET /x HTTP/1.1", "/x", "ok"), base("GET", "/x", "a@b/c d"), base("GET", "/x", "ok", "x-a", " v"),
			base("GET", "/x", "ok", "x-a", "v\t"), base("GET", "/x", "ok", "host", "evil"), base("GET", "/x", "ok", "connection", "close"),
			base("GET", "/x", "ok", "te", "gzip"), base("GET", "/x", "ok", "content-length", "1"),
		} {
			s.headers(uint32(2*i+1), true, f...)
		}
	})
	// Floods of frames that carry nothing.
	add(func(s *seedConn) {
		for range 1200 {
			s.fr.WritePing(false, [8]byte{})
		}
	})
	add(func(s *seedConn) {
		for i := range 1200 {
			s.fr.WritePriority(uint32(2*i+1), http2.PriorityParam{Weight: 15})
		}
	})
	add(func(s *seedConn) {
		s.get(1, "/")
		for range 1200 {
			s.fr.WriteRSTStream(1, http2.ErrCodeCancel)
			s.fr.WriteRawFrame(0xfa, 0, 0, []byte("x"))
		}
	})
	// A stream id going down; an even one; PUSH_PROMISE.
	add(func(s *seedConn) { s.get(5, "/"); s.get(3, "/") })
	add(func(s *seedConn) { s.get(2, "/") })
	add(func(s *seedConn) {
		s.fr.WritePushPromise(http2.PushPromiseParam{StreamID: 1, PromiseID: 2, BlockFragment: []byte{0x82}, EndHeaders: true})
	})
	// A header block left open, and a frame cut short.
	add(func(s *seedConn) {
		s.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: []byte{0x82}})
	})
	add(func(s *seedConn) { s.get(1, "/"); s.buf.Truncate(s.buf.Len() - 2) })
	// gRPC, with a deadline.
	add(func(s *seedConn) {
		s.headers(1, false, ":method", "POST", ":scheme", "http", ":authority", "fuzz.test", ":path", "/pkg.S/M",
			"content-type", "application/grpc", "te", "trailers", "grpc-timeout", "100m")
		s.fr.WriteData(1, true, []byte{0, 0, 0, 0, 0})
	})
	return seeds
}

// donePing is the PING a client sends after its input.
var (
	donePingData = [8]byte{'f', 'u', 'z', 'z', 'd', 'o', 'n', 'e'}
	donePing     = func() []byte {
		var b bytes.Buffer
		http2.NewFramer(&b, nil).WritePing(false, donePingData)
		return b.Bytes()
	}()
)

// FuzzClientFrames: what a client sends after the preface, as it comes.
func FuzzClientFrames(f *testing.F) {
	for _, s := range clientSeeds() {
		f.Add(s)
	}
	up, malformed, what := goUpstream(f)
	relay := newFuzzRelay(f)
	f.Fuzz(func(t *testing.T, frames []byte) {
		h, lim := relay.server(t, up, 500*time.Millisecond)
		nc, err := net.Dial("tcp", relay.ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		// The input, then a PING whose answer says the relay has
		// handled what came before it; the streams it opened are then
		// waited for, and the client leaves.
		nc.SetDeadline(time.Now().Add(5 * time.Second))
		go func() {
			nc.Write([]byte(http2.ClientPreface))
			nc.Write(frames)
			nc.Write(donePing)
		}()
		cr := http2.NewFramer(nil, nc)
		nc.SetReadDeadline(time.Now().Add(time.Second))
		for {
			f, err := cr.ReadFrame()
			if err != nil && !errors.Is(err, http2.ErrFrameTooLarge) {
				if _, ok := err.(http2.StreamError); !ok {
					break
				}
			}
			if p, ok := f.(*http2.PingFrame); ok && p.IsAck() && p.Data == donePingData {
				break
			}
			if _, ok := f.(*http2.GoAwayFrame); ok {
				break
			}
		}
		for deadline := time.Now().Add(2 * time.Second); h.Open() > 0 && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
		nc.(*net.TCPConn).CloseWrite()
		nc.SetReadDeadline(time.Now().Add(2 * time.Second))
		io.Copy(io.Discard, nc)
		nc.Close()
		settle(t, h, lim)
		if n := malformed.Swap(0); n > 0 {
			var whats []string
			what.Range(func(k, _ any) bool { whats = append(whats, k.(string)); return true })
			t.Fatalf("%d malformed requests reached the upstream: %s", n, strings.Join(whats, "; "))
		}
	})
}

// upstreamSeeds are an upstream's frames after its preface, as its
// attacks and breaches of the protocol: its SETTINGS come first.
func upstreamSeeds() [][]byte {
	var seeds [][]byte
	add := func(build func(fr *http2.Framer, enc func(fields ...string) []byte)) {
		var buf, hb bytes.Buffer
		fr := http2.NewFramer(&buf, nil)
		fr.AllowIllegalWrites = true
		e := hpack.NewEncoder(&hb)
		enc := func(fields ...string) []byte {
			hb.Reset()
			for i := 0; i+1 < len(fields); i += 2 {
				e.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
			}
			return bytes.Clone(hb.Bytes())
		}
		build(fr, enc)
		seeds = append(seeds, bytes.Clone(buf.Bytes()))
	}
	answer := func(fr *http2.Framer, enc func(...string) []byte, fields ...string) {
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: enc(fields...), EndHeaders: true})
		fr.WriteData(1, true, []byte("ok"))
	}
	add(func(fr *http2.Framer, enc func(...string) []byte) {
		fr.WriteSettings()
		answer(fr, enc, ":status", "200")
	})
	add(func(fr *http2.Framer, enc func(...string) []byte) {
		fr.WriteRawFrame(http2.FrameSettings, 0, 0, []byte{0, 4, 0x80, 0, 0, 0})
	})
	add(func(fr *http2.Framer, enc func(...string) []byte) {
		fr.WriteSettings()
		fr.WriteWindowUpdate(0, 1<<31-1)
		fr.WriteWindowUpdate(1, 1<<31-1)
	})
	add(func(fr *http2.Framer, enc func(...string) []byte) {
		fr.WriteSettings(http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: 0})
		fr.WriteRSTStream(1, http2.ErrCodeRefusedStream)
	})
	add(func(fr *http2.Framer, enc func(...string) []byte) {
		fr.WriteSettings()
		fr.WriteGoAway(0, http2.ErrCodeNo, nil)
	})
	add(func(fr *http2.Framer, enc func(...string) []byte) {
		fr.WriteSettings()
		answer(fr, enc, ":status", "20x", "connection", "close")
	})
	add(func(fr *http2.Framer, enc func(...string) []byte) {
		fr.WriteSettings()
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: enc(":status", "100"), EndHeaders: true})
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: enc(":status", "200"), EndHeaders: true})
		fr.WriteData(1, false, make([]byte, 40<<10))
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: enc("grpc-status", "0"), EndStream: true, EndHeaders: true})
	})
	add(func(fr *http2.Framer, enc func(...string) []byte) {
		fr.WriteSettings()
		for range 200 {
			fr.WritePing(false, [8]byte{})
		}
		fr.WriteRSTStream(1, http2.ErrCodeNo)
	})
	return seeds
}

// FuzzUpstreamFrames: what the upstream sends after its preface, as it
// comes, to a client's GET, a POST with a body and a gRPC call.
func FuzzUpstreamFrames(f *testing.F) {
	for _, s := range upstreamSeeds() {
		f.Add(s)
	}
	relay := newFuzzRelay(f)
	f.Fuzz(func(t *testing.T, frames []byte) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		var upWG sync.WaitGroup
		upWG.Go(func() {
			for {
				nc, err := ln.Accept()
				if err != nil {
					return
				}
				upWG.Go(func() {
					defer nc.Close()
					br := bufio.NewReader(nc)
					if _, err := io.ReadFull(br, make([]byte, len(http2.ClientPreface))); err != nil {
						return
					}
					// The relay's first frames are read before the
					// input answers them, then the rest are drained.
					fr := http2.NewFramer(nil, br)
					nc.SetDeadline(time.Now().Add(3 * time.Second))
					for {
						f, err := fr.ReadFrame()
						if err != nil {
							return
						}
						if _, ok := f.(*http2.HeadersFrame); ok {
							break
						}
					}
					nc.Write(frames)
					io.Copy(io.Discard, br)
				})
			}
		})
		// An upstream that never answers is given up on soon.
		h, lim := relay.server(t, ln.Addr().String(), 100*time.Millisecond)
		nc, err := net.Dial("tcp", relay.ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		s := newSeed()
		s.get(1, "/")
		s.headers(3, false, ":method", "POST", ":scheme", "http", ":authority", "fuzz.test", ":path", "/up")
		s.fr.WriteData(3, true, make([]byte, 1000))
		s.headers(5, false, ":method", "POST", ":scheme", "http", ":authority", "fuzz.test", ":path", "/pkg.S/M",
			"content-type", "application/grpc", "te", "trailers")
		s.fr.WriteData(5, true, []byte{0, 0, 0, 0, 0})
		nc.SetDeadline(time.Now().Add(5 * time.Second))
		nc.Write([]byte(http2.ClientPreface))
		nc.Write(s.bytes())
		// Read until the three streams ended, or the relay gave up on
		// them (UpstreamTimeout), then leave.
		cr := http2.NewFramer(nil, nc)
		cr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
		ended := map[uint32]bool{}
		for len(ended) < 3 {
			f, err := cr.ReadFrame()
			if err != nil {
				break
			}
			switch f := f.(type) {
			case *http2.RSTStreamFrame:
				ended[f.StreamID] = true
			case *http2.GoAwayFrame:
				ended[0] = true
			default:
				if f.Header().Flags.Has(http2.FlagDataEndStream) && (f.Header().Type == http2.FrameData || f.Header().Type == http2.FrameHeaders) {
					ended[f.Header().StreamID] = true
				}
			}
		}
		nc.Close()
		settle(t, h, lim)
		ln.Close()
		upWG.Wait()
	})
}
