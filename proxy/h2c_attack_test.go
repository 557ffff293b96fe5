package proxy

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/loomgate/loomgate/internal/h2raw"
	"github.com/loomgate/loomgate/limiter"
)

// slowUpstream is an h2c upstream whose /slow?ms=N holds each request for
// N ms or until it is cancelled, and answers the rest at once. reached
// counts the requests under /slow that arrived.
func slowUpstream(t *testing.T) (string, *atomic.Int64) {
	reached := new(atomic.Int64)
	return h2cUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			reached.Add(1)
			ms, _ := strconv.Atoi(r.URL.Query().Get("ms"))
			select {
			case <-time.After(time.Duration(ms) * time.Millisecond):
			case <-r.Context().Done():
				return
			}
		}
		w.Write([]byte("ok"))
	}), reached
}

// victim sends GETs of /fast one after another on a connection of its
// own, 5 ms apart, until stop is closed, and returns their times.
func victim(t *testing.T, addr string, stop <-chan struct{}) []time.Duration {
	client := h2cClient()
	defer client.Transport.(*http.Transport).CloseIdleConnections()
	var times []time.Duration
	for {
		select {
		case <-stop:
			return times
		case <-time.After(5 * time.Millisecond):
		}
		start := time.Now()
		resp, err := client.Get("http://" + addr + "/fast")
		if err != nil {
			t.Errorf("the victim's GET: %v", err)
			return times
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("the victim's GET: %s", resp.Status)
		}
		times = append(times, time.Since(start))
	}
}

// p99 is the 99th percentile of ts.
func p99(ts []time.Duration) time.Duration {
	if len(ts) == 0 {
		return 0
	}
	s := slices.Clone(ts)
	slices.Sort(s)
	return s[len(s)*99/100]
}

// rawFrame is a frame's bytes: its header and payload.
func rawFrame(typ http2.FrameType, flags http2.Flags, id uint32, payload []byte) []byte {
	b := make([]byte, 9, 9+len(payload))
	b[0], b[1], b[2] = byte(len(payload)>>16), byte(len(payload)>>8), byte(len(payload))
	b[3], b[4] = byte(typ), byte(flags)
	binary.BigEndian.PutUint32(b[5:], id)
	return append(b, payload...)
}

// settingsFrame is a SETTINGS frame of INITIAL_WINDOW_SIZE entries, n of
// them, alternating 2^30 and 65535, starting with the first.
func settingsFrame(n int, first bool) []byte {
	var p []byte
	for i := range n {
		v := uint32(65535)
		if (i%2 == 0) == first {
			v = 1 << 30
		}
		p = binary.BigEndian.AppendUint16(p, uint16(http2.SettingInitialWindowSize))
		p = binary.BigEndian.AppendUint32(p, v)
	}
	return rawFrame(http2.FrameSettings, 0, 0, p)
}

// flood writes frames, next's, on c for at most d or until the
// connection ends, while another goroutine reads it; it returns what
// that read and the bytes written.
func flood(t *testing.T, c *h2raw.Conn, d time.Duration, next func(i int) []byte) (h2raw.Read, int64) {
	t.Helper()
	read := make(chan h2raw.Read, 1)
	var ended atomic.Bool
	go func() {
		r := c.ReadAll(d + 10*time.Second)
		ended.Store(true)
		read <- r
	}()
	var written int64
	var buf []byte
	end := time.Now().Add(d)
	for i := 0; time.Now().Before(end) && !ended.Load(); i++ {
		buf = append(buf[:0], next(i)...)
		c.Conn.SetWriteDeadline(time.Now().Add(2 * time.Second))
		n, err := c.Conn.Write(buf)
		written += int64(n)
		if err != nil {
			break
		}
	}
	c.Conn.(*net.TCPConn).CloseWrite()
	return <-read, written
}

// TestH2CSettingsFlood: a connection holding 250 streams sends SETTINGS
// frames that change INITIAL_WINDOW_SIZE back and forth, each entry of
// which walked every stream under the connection's lock: 343 frames of
// 2,730 entries in 5 s cost 12 CPU-seconds and starved another client.
// A frame of more than 100 settings ends the connection (GOAWAY
// PROTOCOL_ERROR, as Go's own server does); a frame costs one walk at
// most; and past a budget of SETTINGS frames a second the connection
// gets a GOAWAY (ENHANCE_YOUR_CALM). Either way it costs
// under half a CPU-second, and another client's p99 stays under 50 ms.
func TestH2CSettingsFlood(t *testing.T) {
	if testing.Short() {
		t.Skip("an attack of some seconds")
	}
	for _, tt := range []struct {
		name string
		next func(i int) []byte
		code http2.ErrCode
	}{
		{"2730 entries a frame", func(i int) []byte { return settingsFrame(2730, i%2 == 0) }, http2.ErrCodeProtocol},
		{"100 entries a frame", func(i int) []byte { return settingsFrame(100, i%2 == 0) }, http2.ErrCodeEnhanceYourCalm},
		{"one entry a frame", func(i int) []byte {
			var b []byte
			for j := range 64 {
				b = append(b, settingsFrame(1, (i+j)%2 == 0)...)
			}
			return b
		}, http2.ErrCodeEnhanceYourCalm},
	} {
		t.Run(tt.name, func(t *testing.T) {
			up, reached := slowUpstream(t)
			tp := startProxy(t, up, limiter.Config{Mode: limiter.Unbounded}, func(c *Config) {
				c.UpstreamTimeout = 30 * time.Second
				c.Logger = discardLogger()
			})
			c, err := h2raw.Dial(tp.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			for i := range 250 {
				c.Get(uint32(2*i+1), "/slow?ms=30000")
			}
			if err := c.Flush(); err != nil {
				t.Fatal(err)
			}
			for deadline := time.Now().Add(5 * time.Second); reached.Load() < 250 && time.Now().Before(deadline); {
				time.Sleep(10 * time.Millisecond)
			}
			stop := make(chan struct{})
			var times []time.Duration
			var wg sync.WaitGroup
			wg.Go(func() { times = victim(t, tp.addr, stop) })
			time.Sleep(200 * time.Millisecond)

			cpu0 := cpuNow(t)
			got, written := flood(t, c, 5*time.Second, tt.next)
			cpu := cpuNow(t) - cpu0
			time.Sleep(300 * time.Millisecond) // the victim after the attack
			close(stop)
			wg.Wait()
			t.Logf("%d streams at the upstream; %d bytes of SETTINGS written; GOAWAY %s; %v of CPU; the victim's p99 %v over %d calls",
				reached.Load(), written, goAwayText(got.GoAway), cpu, p99(times), len(times))
			if got.GoAway == nil || got.GoAway.ErrCode != tt.code {
				t.Errorf("GOAWAY %s; want %v", goAwayText(got.GoAway), tt.code)
			}
			if raceEnabled {
				return // the detector's slowdown is what it would measure
			}
			if cpu > 500*time.Millisecond {
				t.Errorf("the flood cost %v of CPU; want under 0.5 s", cpu)
			}
			if p := p99(times); p > 50*time.Millisecond {
				t.Errorf("the victim's p99 was %v; want under 50 ms", p)
			}
		})
	}
}

// TestH2CUnreadAnswersBounded: a client that sends frames that ask for an
// answer (SETTINGS, PING) without end and reads nothing gets a GOAWAY once
// what it is owed passes the bound, at whichever frame passes it: the
// bound was looked at only when the connection's read buffer emptied,
// which a client that never stops writing rarely lets happen, and a
// process went from 19 to 394 MiB resident before its GOAWAY.
func TestH2CUnreadAnswersBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("an attack of some seconds")
	}
	ping := rawFrame(http2.FramePing, 0, 0, make([]byte, 8))
	push := rawFrame(http2.FrameSettings, 0, 0, []byte{0, byte(http2.SettingEnablePush), 0, 0, 0, 0})
	for _, tt := range []struct {
		name  string
		frame []byte
	}{{"PING", ping}, {"SETTINGS", push}} {
		t.Run(tt.name, func(t *testing.T) {
			up, _ := slowUpstream(t)
			tp := startProxy(t, up, limiter.Config{Mode: limiter.Unbounded}, func(c *Config) { c.Logger = discardLogger() })
			c, err := h2raw.Dial(tp.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.Conn.(*net.TCPConn).SetReadBuffer(4 << 10)
			if err := c.Flush(); err != nil {
				t.Fatal(err)
			}
			chunk := bytes.Repeat(tt.frame, (64<<10)/len(tt.frame))
			// Nothing is read: the answers pile up in the proxy, and
			// what the client may write before it is cut off is what
			// the proxy holds for it, besides the kernels' buffers.
			var written int64
			const most = 256 << 20
			end := time.Now().Add(20 * time.Second)
			for written < most && time.Now().Before(end) {
				c.Conn.SetWriteDeadline(time.Now().Add(3 * time.Second))
				n, err := c.Conn.Write(chunk)
				written += int64(n)
				if err != nil {
					break
				}
			}
			t.Logf("%d MiB written before the connection was ended", written>>20)
			if written > 64<<20 {
				t.Errorf("the client wrote %d MiB of %s without reading before it was cut off; want what the bound on answers owed lets it (9 MiB) and the kernels' buffers", written>>20, tt.name)
			}
			tp.waitIdle(t)
		})
	}
}

// TestH2CMadeYouReset: the MadeYouReset attack (CVE-2025-8671): 100
// streams opened in one write, and 50 ms later, once they reached the
// upstream, a frame on each that makes loomgate reset it itself for a
// breach of the protocol (a WINDOW_UPDATE of 0, one that overflows its
// window, trailers without END_STREAM), over and over. Those resets are
// the client's as much as a RST_STREAM is: charged to its budget of
// resets, so that no more than 100 streams reach the upstream before the
// connection's GOAWAY (ENHANCE_YOUR_CALM). They were charged nothing:
// 9,900 streams in 5 s reached the upstream, and no GOAWAY came.
func TestH2CMadeYouReset(t *testing.T) {
	if testing.Short() {
		t.Skip("an attack of some seconds")
	}
	for _, tt := range []struct {
		name string
		open bool // the stream is opened with a body to come
		bad  func(c *h2raw.Conn, id uint32)
	}{
		{"WINDOW_UPDATE of 0", false, func(c *h2raw.Conn, id uint32) {
			c.Framer.WriteRawFrame(http2.FrameWindowUpdate, 0, id, []byte{0, 0, 0, 0})
		}},
		{"WINDOW_UPDATE overflowing", false, func(c *h2raw.Conn, id uint32) { c.Framer.WriteWindowUpdate(id, 1<<31-1) }},
		{"trailers without END_STREAM", true, func(c *h2raw.Conn, id uint32) {
			c.Framer.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.Block("x-trailer", "t"), EndHeaders: true})
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			up, reached := slowUpstream(t)
			tp := startProxy(t, up, limiter.Config{Mode: limiter.Unbounded}, func(c *Config) {
				c.UpstreamTimeout = 30 * time.Second
				c.Logger = discardLogger()
			})
			c, err := h2raw.Dial(tp.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			read := make(chan h2raw.Read, 1)
			var ended atomic.Bool
			go func() {
				r := c.ReadAll(15 * time.Second)
				ended.Store(true)
				read <- r
			}()
			id := uint32(1)
			end := time.Now().Add(5 * time.Second)
			for time.Now().Before(end) && !ended.Load() {
				first := id
				for range 100 {
					b := c.Block(":method", "POST", ":scheme", "http", ":authority", "h2raw.test", ":path", "/slow?ms=30000")
					c.Framer.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: b, EndStream: !tt.open, EndHeaders: true})
					id += 2
				}
				if c.Flush() != nil {
					break
				}
				time.Sleep(50 * time.Millisecond)
				for s := first; s < id; s += 2 {
					tt.bad(c, s)
				}
				if c.Flush() != nil {
					break
				}
			}
			c.Conn.(*net.TCPConn).CloseWrite()
			got := <-read
			t.Logf("%d streams opened, %d reached the upstream; GOAWAY %s", (id-1)/2, reached.Load(), goAwayText(got.GoAway))
			if got.GoAway == nil || got.GoAway.ErrCode != http2.ErrCodeEnhanceYourCalm {
				t.Errorf("GOAWAY %s; want ENHANCE_YOUR_CALM", goAwayText(got.GoAway))
			}
			if n := reached.Load(); n > 100 {
				t.Errorf("%d streams reached the upstream; want 100 at most", n)
			}
			tp.waitIdle(t)
		})
	}
}

// TestH2CControlFrameFlood: frames that carry nothing for a stream (PING,
// PRIORITY, empty DATA, RST_STREAM on a closed stream, WINDOW_UPDATE on
// one, frames of an unknown type), sent without end by a client that reads
// its answers, end in a GOAWAY (ENHANCE_YOUR_CALM) once past the
// connection's budget of them; each cost its share of the CPU, under the
// connection's lock, for as long as the client liked.
func TestH2CControlFrameFlood(t *testing.T) {
	if testing.Short() {
		t.Skip("an attack of some seconds")
	}
	const n = 256 // frames a write
	repeat := func(f []byte) func(int) []byte {
		b := bytes.Repeat(f, n)
		return func(int) []byte { return b }
	}
	for _, tt := range []struct {
		name string
		open bool // a stream 1 is opened first, with a body to come
		done bool // a stream 1 is opened and answered first
		next func(int) []byte
	}{
		{"PING", false, false, repeat(rawFrame(http2.FramePing, 0, 0, make([]byte, 8)))},
		{"PRIORITY", false, false, func(i int) []byte {
			var b []byte
			for j := range n {
				b = append(b, rawFrame(http2.FramePriority, 0, uint32(2*(i*n+j)+1), []byte{0, 0, 0, 0, 15})...)
			}
			return b
		}},
		{"empty DATA", true, false, repeat(rawFrame(http2.FrameData, 0, 1, nil))},
		{"RST_STREAM on a closed stream", false, true, repeat(rawFrame(http2.FrameRSTStream, 0, 1, []byte{0, 0, 0, 8}))},
		{"WINDOW_UPDATE on a closed stream", false, true, repeat(rawFrame(http2.FrameWindowUpdate, 0, 1, []byte{0, 0, 0, 1}))},
		{"unknown type", false, false, repeat(rawFrame(0xfa, 0, 0, []byte("loomgate")))},
	} {
		t.Run(tt.name, func(t *testing.T) {
			up, _ := slowUpstream(t)
			tp := startProxy(t, up, limiter.Config{Mode: limiter.Unbounded}, func(c *Config) {
				c.UpstreamTimeout = 30 * time.Second
				c.BodyTimeout = 30 * time.Second
				c.Logger = discardLogger()
			})
			c, err := h2raw.Dial(tp.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			switch {
			case tt.open:
				c.Framer.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, EndHeaders: true,
					BlockFragment: c.Block(":method", "POST", ":scheme", "http", ":authority", "h2raw.test", ":path", "/slow?ms=30000")})
			case tt.done:
				c.Get(1, "/fast")
			}
			if err := c.Flush(); err != nil {
				t.Fatal(err)
			}
			if tt.done {
				time.Sleep(200 * time.Millisecond) // answered and closed
			}
			got, written := flood(t, c, 5*time.Second, tt.next)
			t.Logf("%d frames written; GOAWAY %s", written/int64(len(tt.next(0))/n), goAwayText(got.GoAway))
			if got.GoAway == nil || got.GoAway.ErrCode != http2.ErrCodeEnhanceYourCalm {
				t.Errorf("GOAWAY %s; want ENHANCE_YOUR_CALM", goAwayText(got.GoAway))
			}
			tp.waitIdle(t)
		})
	}
}

// TestH2CDecreasingStreamID: HEADERS on a stream id below one the client
// already opened is a connection error of type PROTOCOL_ERROR (RFC 9113,
// 5.1.1), not STREAM_CLOSED.
func TestH2CDecreasingStreamID(t *testing.T) {
	up, reached := slowUpstream(t)
	tp := startProxy(t, up, limiter.Config{Mode: limiter.Unbounded}, func(c *Config) { c.Logger = discardLogger() })
	c, err := h2raw.Dial(tp.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Get(5, "/slow?ms=30000")
	c.Get(3, "/slow?ms=1")
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	got := c.ReadAll(5 * time.Second)
	if got.GoAway == nil || got.GoAway.ErrCode != http2.ErrCodeProtocol {
		t.Errorf("GOAWAY %s; want PROTOCOL_ERROR", goAwayText(got.GoAway))
	}
	if got.GoAway != nil && got.GoAway.LastStreamID != 5 {
		t.Errorf("GOAWAY's last stream %d; want 5", got.GoAway.LastStreamID)
	}
	if n := reached.Load(); n > 1 {
		t.Errorf("%d requests reached the upstream; want stream 5's at most", n)
	}
	tp.waitIdle(t)
}

// TestH2CMalformedNeverForwarded: requests whose header block RFC 9113
// calls malformed are answered 400 with Loomgate-Outcome: bad_request,
// and none of them reaches the upstream: a :path that is no path (a
// space in it, no leading slash, an absolute URI, "*" other than with
// OPTIONS), a :method that is no token, an :authority with userinfo or a
// space, a field value with whitespace at either end (8.2.1), a host
// that is not the :authority (8.3.1).
func TestH2CMalformedNeverForwarded(t *testing.T) {
	var reached atomic.Int64
	var seen sync.Map
	up := h2cUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		seen.Store(r.Method+" "+r.RequestURI+" "+r.Host, true)
		w.Write([]byte("ok"))
	})
	tp := startProxy(t, up, limiter.Config{Mode: limiter.Unbounded}, func(c *Config) { c.Logger = discardLogger() })
	base := func(method, path, authority string, extra ...string) []string {
		return append([]string{":method", method, ":scheme", "http", ":authority", authority, ":path", path}, extra...)
	}
	cases := []struct {
		name   string
		fields []string
	}{
		{"path with a space", base("GET", "/a b", "ok.test")},
		{"path without a slash", base("GET", "a/b", "ok.test")},
		{"absolute path", base("GET", "http://evil/x", "ok.test")},
		{"asterisk with GET", base("GET", "*", "ok.test")},
		{"method that is a request line", base("GET /x HTTP/1.1", "/x", "ok.test")},
		{"authority with userinfo and a space", base("GET", "/x", "a@b/c d")},
		{"authority with userinfo", base("GET", "/x", "user@ok.test")},
		{"value with a leading space", base("GET", "/x", "ok.test", "x-a", " v")},
		{"value with a trailing space", base("GET", "/x", "ok.test", "x-a", "v ")},
		{"value with a leading tab", base("GET", "/x", "ok.test", "x-a", "\tv")},
		{"value with a trailing tab", base("GET", "/x", "ok.test", "x-a", "v\t")},
		{"host other than the authority", base("GET", "/x", "ok.test", "host", "evil.test")},
	}
	c, err := h2raw.Dial(tp.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i, tc := range cases {
		c.Framer.WriteHeaders(http2.HeadersFrameParam{StreamID: uint32(2*i + 1), BlockFragment: c.Block(tc.fields...), EndStream: true, EndHeaders: true})
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	got := c.ReadAll(2 * time.Second)
	for i, tc := range cases {
		h := got.Headers[uint32(2*i+1)]
		if s, o := h2raw.Field(h, ":status"), h2raw.Field(h, "loomgate-outcome"); s != "400" || o != "bad_request" {
			t.Errorf("%s: %s, Loomgate-Outcome %q; want 400, bad_request", tc.name, s, o)
		}
	}
	if n := reached.Load(); n > 0 {
		var what []string
		seen.Range(func(k, _ any) bool { what = append(what, k.(string)); return true })
		t.Errorf("%d malformed requests reached the upstream: %s", n, strings.Join(what, "; "))
	}
	// What is well formed still goes: the same connection's next stream,
	// with a host that agrees with its :authority, and OPTIONS *.
	c2, err := h2raw.Dial(tp.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	c2.Framer.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: c2.Block(base("GET", "/x?a=b%20c", "ok.test:80", "host", "ok.test:80", "x-a", "v w")...), EndStream: true, EndHeaders: true})
	c2.Framer.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: c2.Block(base("OPTIONS", "*", "ok.test")...), EndStream: true, EndHeaders: true})
	if err := c2.Flush(); err != nil {
		t.Fatal(err)
	}
	got = c2.ReadAll(2 * time.Second)
	for _, id := range []uint32{1, 3} {
		if s := h2raw.Field(got.Headers[id], ":status"); s != "200" {
			t.Errorf("well-formed stream %d: %q; want 200", id, s)
		}
	}
	tp.waitIdle(t)
}

// slowObserver is an Observer that blocks on the records of one target,
// as one whose access log goes to a pipe nobody reads does.
type slowObserver struct {
	target string
	block  time.Duration
}

func (s slowObserver) Observe(o *Outcome) {
	if string(o.Target) == s.target {
		time.Sleep(s.block)
	}
}

// TestH2CSlowObserverStallsNoOtherClient: the observer (metrics, advice,
// access log) is called with no lock of the relay held. A record handed
// to it under its client's lock held that client's lock for as long as
// the observer took, and the reader of the upstream connection that the
// client shares with others waited for it at the client's next frame:
// another client's call on the same upstream connection waited a second
// behind a log that blocked for one.
func TestH2CSlowObserverStallsNoOtherClient(t *testing.T) {
	up := h2cUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/stream" {
			// A response that keeps coming, so that the upstream
			// connection's reader needs its client's lock every 5 ms.
			for range 400 {
				if _, err := w.Write([]byte("x")); err != nil {
					return
				}
				w.(http.Flusher).Flush()
				time.Sleep(5 * time.Millisecond)
			}
			return
		}
		w.Write([]byte("ok"))
	})
	tp := startProxy(t, up, limiter.Config{Mode: limiter.Unbounded}, func(c *Config) {
		c.Observer = slowObserver{target: "/logged", block: time.Second}
		c.Logger = discardLogger()
	})
	// One client: a response that keeps coming, then a call whose record
	// the observer takes a second over.
	a := h2cClient()
	resp, err := a.Get("http://" + tp.addr + "/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	go io.Copy(io.Discard, resp.Body)
	// Another client, on a connection of its own, whose calls share the
	// upstream connection.
	b := h2cClient()
	if r, err := b.Get("http://" + tp.addr + "/fast"); err == nil {
		r.Body.Close()
	}
	go func() {
		if r, err := a.Get("http://" + tp.addr + "/logged"); err == nil {
			io.Copy(io.Discard, r.Body)
			r.Body.Close()
		}
	}()
	var most time.Duration
	for end := time.Now().Add(1500 * time.Millisecond); time.Now().Before(end); {
		start := time.Now()
		r, err := b.Get("http://" + tp.addr + "/fast")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, r.Body)
		r.Body.Close()
		most = max(most, time.Since(start))
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("the other client's slowest call: %v", most)
	if most > 500*time.Millisecond {
		t.Errorf("the other client's slowest call took %v while the observer blocked on a record of the first's; want under 500 ms", most)
	}
}
