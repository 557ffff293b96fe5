package header

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
)

func TestScan(t *testing.T) {
	for _, tt := range []struct {
		raw    string
		fields Fields
		ok     bool
	}{
		{"Host: x\r\nUser-Agent: a\r\n\r\n", 0, true},
		{"Host: x\r\nconnection: close\r\n\r\n", HopFields, true},
		{"Host: x\r\nTE: trailers\r\n\r\n", HopFields, true},
		{"Host: x\r\nEXPECT: 100-continue\r\n\r\n", Expect, true},
		{"Host: x\r\nExpect: 100-continue\r\nUpgrade: websocket\r\n\r\n", HopFields | Expect, true},
		{"Host: x\r\nContent-Length: 3\r\n\r\n", 0, true},
		{"Host: x\r\nContent-Length: 3\r\ntransfer-encoding: chunked\r\n\r\n", Coding, false},
		{"Host: x\r\nTransfer-Encoding: identity\r\n\r\n", Coding, true},
		{"Host: x\r\nX A: 1\r\n\r\n", 0, false},
		{"Host: x\r\n: 1\r\n\r\n", 0, false},
		{"Host: x\r\nX-A: 1\r\n Connection: folded into X-A\r\n\r\n", 0, true},
		{"Host: x\r\n\r\nConnection: after the block\r\n", 0, true},
	} {
		fields, ok := Scan([]byte(tt.raw))
		if fields != tt.fields || ok != tt.ok {
			t.Errorf("Scan(%q) = %b, %v; want %b, %v", tt.raw, fields, ok, tt.fields, tt.ok)
		}
	}
}

func TestScanDoesNotAllocate(t *testing.T) {
	raw := []byte("Host: x\r\nUser-Agent: a\r\nConnection: keep-alive\r\nAccept: */*\r\n\r\n")
	if n := testing.AllocsPerRun(100, func() { Scan(raw) }); n != 0 {
		t.Errorf("Scan allocates %v times; want 0", n)
	}
}

func TestVersionAndAuthority(t *testing.T) {
	for _, tt := range []struct {
		proto string
		want  bool
	}{{"HTTP/1.1", true}, {"HTTP/1.0", true}, {"HTTP/1.2", true}, {"HTTP/2.0", false}, {"HTTP/x", false}, {"HTTP/1.", false}} {
		if got := ValidVersion([]byte(tt.proto)); got != tt.want {
			t.Errorf("ValidVersion(%q) = %v; want %v", tt.proto, got, tt.want)
		}
	}
	for _, tt := range []struct {
		target, authority string
		ok, valid         bool
	}{
		{"/path", "", false, false},
		{"http://x:8080/abs?q=1", "x:8080", true, true},
		{"http://x?q", "x", true, true},
		{"http://user@x/", "user@x", true, false},
		{"http:///p", "", true, false},
	} {
		a, ok := AbsoluteAuthority([]byte(tt.target))
		if string(a) != tt.authority || ok != tt.ok {
			t.Errorf("AbsoluteAuthority(%q) = %q, %v; want %q, %v", tt.target, a, ok, tt.authority, tt.ok)
		}
		if ok && ValidAuthority(a) != tt.valid {
			t.Errorf("ValidAuthority(%q) = %v; want %v", a, !tt.valid, tt.valid)
		}
	}
}

func TestBareLFBlock(t *testing.T) {
	for _, tt := range []struct {
		buf  string
		want bool
	}{
		{"GET / HTTP/1.1\nHost: x\n\n", true},
		{"GET / HTTP/1.1\r\nHost: x\n\r\n", true},
		{"GET / HTTP/1.1\r\nHost: x\r\n\n", true},
		{"GET / HTTP/1.1\nHost: x\n", false},
		{"GET / HTTP/1.1\r\nHost: x\r\nX-A: \\n\n", false}, // a literal backslash-n, one LF
		{"GET / HTTP/1.1\r\nHost: x\r\n", false},
		{"GET / HTTP/1.1\nX-Long: " + strings.Repeat("a", 500) + "\n\n", true},
	} {
		// The error fasthttp gives a header read cut by a timeout.
		err := fmt.Errorf("error when reading request headers: %w: buffer size=%d, contents: %s", os.ErrDeadlineExceeded, len(tt.buf), snippet([]byte(tt.buf)))
		if got := BareLFBlock(err); got != tt.want {
			t.Errorf("BareLFBlock(%q) = %v; want %v", tt.buf, got, tt.want)
		}
	}
}

// snippet is fasthttp's bufferSnippet.
func snippet(b []byte) string {
	n := len(b)
	start := 200
	end := n - start
	if start >= end {
		start = n
		end = n
	}
	bStart, bEnd := b[:start], b[end:]
	if len(bEnd) == 0 {
		return fmt.Sprintf("%q", b)
	}
	return fmt.Sprintf("%q...%q", bStart, bEnd)
}

func FuzzScan(f *testing.F) {
	for _, headers := range []string{
		"Host: x\r\nX A: 1\r\n\r\n",
		"Host : x\r\n\r\n",
		"Host: x\r\nX-A: a\x00b\r\n\r\n",
		"Host: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
		"Host: x\r\nConnection: Content-Length\r\nContent-Length: 3\r\n\r\n",
		"Host: x\r\nExpect: 100-continue\r\nKeep-Alive: 1\r\n\r\n",
		"Host: x\r\nX-A: 1\r\n continued\r\n\r\n",
	} {
		f.Add(headers)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		fields, ok := Scan([]byte(raw))
		var want Fields
		// Whatever is accepted has token names, and not both framings.
		var length, coding bool
		for _, line := range strings.Split(raw, "\n") {
			line = strings.TrimSuffix(line, "\r")
			if line == "" {
				break
			}
			if line[0] == ' ' || line[0] == '\t' {
				continue
			}
			name, _, colon := strings.Cut(line, ":")
			if !colon || name == "" || strings.ContainsFunc(name, func(r rune) bool { return r > 0x7f || !tchar[r] }) {
				if ok {
					t.Fatalf("Scan(%q) accepted the name %q", raw, name)
				}
				return
			}
			if slices.ContainsFunc(Hop, func(h string) bool { return strings.EqualFold(h, name) }) {
				want |= HopFields
			}
			if strings.EqualFold(name, "Expect") {
				want |= Expect
			}
			length = length || strings.EqualFold(name, "Content-Length")
			if strings.EqualFold(name, "Transfer-Encoding") {
				coding = true
				want |= Coding
			}
		}
		if ok == (length && coding) {
			t.Fatalf("Scan(%q) = %v with Content-Length %v, Transfer-Encoding %v; want false only with both", raw, ok, length, coding)
		}
		if fields != want {
			t.Fatalf("Scan(%q) fields = %b; want %b", raw, fields, want)
		}
	})
}
