package proxy

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loomgate/loomgate/internal/h2raw"
	"github.com/loomgate/loomgate/internal/outcome"
	"github.com/loomgate/loomgate/limiter"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// frameUpstream is an h2c upstream written in frames, for what Go's own
// server never does on cue: answer tells it, for the nth stream of its
// cth connection (both from 1), to refuse it (RST_STREAM
// REFUSED_STREAM), to go away below it (GOAWAY), or to answer it 200.
// answered counts the streams it answered.
func frameUpstream(t *testing.T, answer func(c, n int) string, answered *atomic.Int64) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var conns atomic.Int32
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			c := int(conns.Add(1))
			go func() {
				defer nc.Close()
				br := bufio.NewReader(nc)
				if _, err := io.ReadFull(br, make([]byte, len(http2.ClientPreface))); err != nil {
					return
				}
				fr := http2.NewFramer(nc, br)
				fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
				fr.WriteSettings()
				var hb bytes.Buffer
				enc := hpack.NewEncoder(&hb)
				n := 0
				for {
					f, err := fr.ReadFrame()
					if err != nil {
						return
					}
					switch f := f.(type) {
					case *http2.SettingsFrame:
						if !f.IsAck() {
							fr.WriteSettingsAck()
						}
					case *http2.MetaHeadersFrame:
						n++
						switch answer(c, n) {
						case "refuse":
							fr.WriteRSTStream(f.StreamID, http2.ErrCodeRefusedStream)
						case "goaway":
							fr.WriteGoAway(0, http2.ErrCodeNo, nil)
						default:
							hb.Reset()
							enc.WriteField(hpack.HeaderField{Name: ":status", Value: "200"})
							fr.WriteHeaders(http2.HeadersFrameParam{StreamID: f.StreamID, BlockFragment: hb.Bytes(), EndStream: true, EndHeaders: true})
							answered.Add(1)
						}
					}
				}
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}

// TestH2CUnprocessedStreamsAreRetried: a stream the upstream says it did
// not process, refused (REFUSED_STREAM) or below its GOAWAY, is opened
// again, on the same connection or a new one, and answered: RFC 9113,
// 8.7 makes that safe whatever the method, and an upstream that restarts
// gracefully says so of the requests it was just sent. One record each,
// ok.
func TestH2CUnprocessedStreamsAreRetried(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		answer func(c, n int) string
	}{
		{"refused", func(c, n int) string {
			if n == 1 {
				return "refuse"
			}
			return "answer"
		}},
		{"goaway", func(c, n int) string {
			if c == 1 {
				return "goaway"
			}
			return "answer"
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var answered atomic.Int64
			up := frameUpstream(t, tt.answer, &answered)
			tp := startProxy(t, up, limiter.Config{Mode: limiter.Unbounded}, func(c *Config) { c.Logger = discardLogger() })
			c, err := h2raw.Dial(tp.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.Get(1, "/once", "content-type", "application/grpc")
			if err := c.Flush(); err != nil {
				t.Fatal(err)
			}
			got := c.ReadAll(time.Second)
			if h := got.Headers[1]; h2raw.Field(h, ":status") != "200" || h2raw.Field(h, "loomgate-outcome") != "" {
				t.Errorf("stream 1: %v; want the upstream's 200", h)
			}
			if answered.Load() != 1 {
				t.Errorf("the upstream answered %d; want 1", answered.Load())
			}
			outcomes := tp.rec.wait(t, 1)
			if len(outcomes) != 1 || outcomes[0].Kind != outcome.OK {
				t.Errorf("records %v; want one, ok", outcomes)
			}
		})
	}
}

// TestH2CManyClientsLeaveAtOnce: twenty connections of ten streams each,
// some at the upstream and the rest queued behind 5 workers, all closed
// at once. Every stream is counted once, as a client that left, every
// request that reached the upstream is cancelled there, and no permit,
// queue place or byte is left held.
func TestH2CManyClientsLeaveAtOnce(t *testing.T) {
	var atUpstream, cancelled atomic.Int64
	up := h2cUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		atUpstream.Add(1)
		select {
		case <-r.Context().Done():
			cancelled.Add(1)
		case <-time.After(10 * time.Second):
		}
	})
	tp := startProxy(t, up, limiter.Config{Mode: limiter.Fixed, Workers: 5, QueueSize: 1000, QueueTimeout: time.Minute},
		func(c *Config) { c.Logger = discardLogger() })
	const conns, streams = 20, 10
	var cs []*h2raw.Conn
	for range conns {
		c, err := h2raw.Dial(tp.addr)
		if err != nil {
			t.Fatal(err)
		}
		for i := range streams {
			c.Get(uint32(2*i+1), "/slow")
		}
		if err := c.Flush(); err != nil {
			t.Fatal(err)
		}
		cs = append(cs, c)
	}
	deadline := time.Now().Add(10 * time.Second)
	for s := tp.limiter.Stats(); s.InFlight < 5 || s.Queued < conns*streams-5; s = tp.limiter.Stats() {
		if time.Now().After(deadline) {
			t.Fatalf("limiter %+v; want 5 in flight and %d queued", s, conns*streams-5)
		}
		time.Sleep(5 * time.Millisecond)
	}
	for _, c := range cs {
		c.Close()
	}
	tp.waitIdle(t)
	got := tp.rec.wait(t, conns*streams)
	time.Sleep(100 * time.Millisecond) // a second count would be in by now
	if n := len(tp.rec.wait(t, 0)); n != conns*streams {
		t.Errorf("%d records; want %d, one a stream", n, conns*streams)
	}
	for _, o := range got {
		if o.Kind != ClientClosed {
			t.Errorf("record %v %s; want client_closed", o.Kind, o.Target)
			break
		}
	}
	for atUpstream.Load() != cancelled.Load() && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	// A queued stream of a connection not yet seen closed may take a
	// freed permit and go upstream: it is cancelled there too.
	if a, c := atUpstream.Load(), cancelled.Load(); a < 5 || c != a {
		t.Errorf("the upstream got %d requests and saw %d cancelled; want 5 or more, all cancelled", a, c)
	}
}
