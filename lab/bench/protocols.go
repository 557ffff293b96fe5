package bench

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/loomgate/loomgate/lab/stub"
)

// The engine speaks HTTP/1.1 through fasthttp, one connection per closed
// loop user, and HTTP/2 with prior knowledge (h2c) or gRPC over a few
// connections that every user's streams share, as HTTP/2 clients do: a
// gRPC client puts all its calls on one connection. Which is sent, when,
// and how it is recorded do not depend on the protocol; only the sender
// does.

// Proto is the protocol the rig speaks to the target.
type Proto string

const (
	// HTTP1 is HTTP/1.1, the zero value's protocol.
	HTTP1 Proto = "http1"
	// H2C is HTTP/2 with prior knowledge, on cleartext: a GET per request.
	H2C Proto = "h2c"
	// GRPC is a unary gRPC call per request, on cleartext HTTP/2. The
	// URL's path names the method, /package.Service/Method, or a stub
	// path, /wait or /cpu, for the stub's Wait and CPU; the query, as
	// the string of a google.protobuf.StringValue, is the request
	// ("ms=200"). A method whose request is empty, such as
	// /grpc.health.v1.Health/Check, is called with an empty query.
	GRPC Proto = "grpc"
)

// Protos lists the protocols, HTTP/1.1 first.
func Protos() []Proto { return []Proto{HTTP1, H2C, GRPC} }

// ParseProto reads a protocol's name; "" is HTTP/1.1.
func ParseProto(s string) (Proto, error) {
	switch p := Proto(s); p {
	case "", HTTP1:
		return HTTP1, nil
	case H2C, GRPC:
		return p, nil
	}
	return "", fmt.Errorf("%w: protocol %q: want http1, h2c or grpc", ErrConfig, s)
}

func (p Proto) String() string {
	if p == "" {
		return string(HTTP1)
	}
	return string(p)
}

// multiplexed reports whether requests share connections as streams.
func (p Proto) multiplexed() bool { return p == H2C || p == GRPC }

// DefaultConns is how many connections the streams of an h2c or gRPC run
// share when the config does not say: a few clients' worth, so that one
// connection's writer is not the rig's bottleneck, and far fewer than the
// users, as HTTP/2 clients are.
const DefaultConns = 4

// maxConns bounds Conns: a connection per user is HTTP/1.1's model.
const maxConns = 1000

// checkProto validates a protocol and its connection count, and returns
// the count in force.
func checkProto(p Proto, conns int) (int, error) {
	if _, err := ParseProto(string(p)); err != nil {
		return 0, err
	}
	if !p.multiplexed() {
		if conns != 0 {
			return 0, fmt.Errorf("%w: Conns %d with %s: HTTP/1.1 has a connection per request in flight; Conns goes with h2c or grpc", ErrConfig, conns, p)
		}
		return 0, nil
	}
	if conns < 0 || conns > maxConns {
		return 0, fmt.Errorf("%w: Conns %d: want 1 to %d connections (0 for %d)", ErrConfig, conns, maxConns, DefaultConns)
	}
	if conns == 0 {
		conns = DefaultConns
	}
	return conns, nil
}

// overWhat says in the progress stream what the requests go over.
func overWhat(p Proto, conns int) string {
	if !p.multiplexed() {
		return ""
	}
	return fmt.Sprintf(" over %s on %d connections", p, conns)
}

// streams is the connections an h2c or gRPC run shares, each request on
// the next one in turn.
type streams struct {
	proto Proto
	// h2c: a client per connection. net/http opens one HTTP/2 connection
	// per host and puts every request on it (the server allows 10000
	// streams); MaxConnsPerHost 1 makes requests that race the first dial
	// wait for it rather than dial more.
	clients []*http.Client
	// gRPC: a ClientConn per connection.
	conns []*grpc.ClientConn
	next  atomic.Uint32
}

// newStreams dials nothing yet: connections open with the first request
// on each, through dial, so that an abandoned run can close them.
func newStreams(tgt target, p Proto, n int, dial func(addr string, timeout time.Duration) (net.Conn, error)) (*streams, error) {
	s := &streams{proto: p}
	const dialTimeout = 5 * time.Second
	for range n {
		switch p {
		case H2C:
			protos := new(http.Protocols)
			protos.SetUnencryptedHTTP2(true)
			s.clients = append(s.clients, &http.Client{Transport: &http.Transport{
				Protocols:       protos,
				MaxConnsPerHost: 1,
				DialContext: func(_ context.Context, _, addr string) (net.Conn, error) {
					return dial(addr, dialTimeout)
				},
				DisableCompression: true,
			}})
		case GRPC:
			cc, err := grpc.NewClient("passthrough:///"+tgt.addr,
				grpc.WithTransportCredentials(insecure.NewCredentials()),
				grpc.WithContextDialer(func(_ context.Context, addr string) (net.Conn, error) {
					return dial(addr, dialTimeout)
				}),
				// A retry would hide an error and count one call twice.
				grpc.WithDisableRetry(),
				grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})),
				grpc.WithUserAgent("loomgate-bench"),
			)
			if err != nil {
				s.close()
				return nil, fmt.Errorf("%w: %s: %v", ErrConfig, tgt.addr, err)
			}
			s.conns = append(s.conns, cc)
		}
	}
	return s, nil
}

// close closes every connection.
func (s *streams) close() {
	for _, c := range s.clients {
		c.CloseIdleConnections()
	}
	for _, cc := range s.conns {
		cc.Close()
	}
}

// pick is the index of the connection the next sender uses.
func (s *streams) pick(n int) int { return int(s.next.Add(1)-1) % n }

// sender returns a user's or worker's request for uri, on the next
// connection in turn. Run and RunOpen have checked uri (checkURIs); were
// it wrong, every request would fail with why.
func (s *streams) sender(uri string) func(time.Time) answer {
	if s.proto == H2C {
		return h2cSender(s.clients[s.pick(len(s.clients))], uri)
	}
	method, msg, err := grpcCall(uri)
	if err != nil {
		return func(time.Time) answer { return answer{retryAfter: -1, err: err} }
	}
	return grpcSender(s.conns[s.pick(len(s.conns))], method, msg)
}

// checkURIs reports the first URI a run over p could not use: h2c and
// gRPC are cleartext (prior knowledge; no TLS), and gRPC calls a method.
func checkURIs(p Proto, uris ...string) error {
	if !p.multiplexed() {
		return nil
	}
	for _, u := range uris {
		if strings.HasPrefix(u, "https:") {
			return fmt.Errorf("%w: URL %q: %s is HTTP/2 on cleartext; want an http:// URL", ErrConfig, u, p)
		}
		if p != GRPC {
			continue
		}
		if _, _, err := grpcCall(u); err != nil {
			return err
		}
	}
	return nil
}

func h2cSender(c *http.Client, uri string) func(time.Time) answer {
	return func(deadline time.Time) answer {
		a := answer{retryAfter: -1}
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, uri, nil)
		if err != nil {
			a.err = err
			return a
		}
		resp, err := c.Do(req)
		if err != nil {
			a.err = err
			return a
		}
		// The answer is whole when its body is: a plain HTTP/2 request
		// holds its permit in loomgate to the last byte.
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil {
			a.err = err
			return a
		}
		a.status = resp.StatusCode
		a.retryAfter = retryAfterSeconds(resp.Header.Get("Retry-After"))
		return a
	}
}

// retryAfterSeconds reads a Retry-After of whole seconds, -1 for none.
func retryAfterSeconds(v string) int64 {
	if s, err := strconv.ParseInt(v, 10, 64); err == nil && s >= 0 {
		return s
	}
	return -1
}

// grpcCall is the method and the marshalled request a gRPC URL names.
func grpcCall(uri string) (method string, msg []byte, err error) {
	u, err := url.Parse(uri)
	if err != nil {
		return "", nil, fmt.Errorf("%w: URL %q: %v", ErrConfig, uri, err)
	}
	switch method = u.Path; method {
	case "/wait":
		method = "/" + stub.GRPCService + "/Wait"
	case "/cpu":
		method = "/" + stub.GRPCService + "/CPU"
	}
	if parts := strings.Split(method, "/"); len(parts) != 3 || parts[1] == "" || parts[2] == "" {
		return "", nil, fmt.Errorf("%w: URL %q: with grpc the path is the method, /package.Service/Method, or /wait or /cpu for the stub's Wait and CPU", ErrConfig, uri)
	}
	// An empty StringValue marshals to nothing: the empty request any
	// method reads as its own.
	msg, err = proto.Marshal(wrapperspb.String(u.RawQuery))
	return method, msg, err
}

// rawCodec sends and receives messages as the bytes they are: the rig
// marshals its one request once, and a response is read, not decoded. It
// is named proto so that servers read the request as protobuf.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *v.(*[]byte), nil }

func (rawCodec) Unmarshal(data []byte, v any) error {
	*v.(*[]byte) = data
	return nil
}

func (rawCodec) Name() string { return "proto" }

func grpcSender(cc *grpc.ClientConn, method string, msg []byte) func(time.Time) answer {
	var reply []byte
	return func(deadline time.Time) answer {
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		defer cancel()
		var header, trailer metadata.MD
		err := cc.Invoke(ctx, method, &msg, &reply, grpc.Header(&header), grpc.Trailer(&trailer))
		reply = nil
		return grpcAnswer(err, ctx.Err(), header, trailer)
	}
}

// grpcAnswer is a call's answer in the terms of HTTP/1.1's, so that both
// are counted alike: what loomgate answers a rejection (Loomgate-Outcome
// rejected_*, RESOURCE_EXHAUSTED) is a 503 with its Retry-After, as over
// HTTP/1.1; UNAVAILABLE, which a server sends when it cannot serve, a
// 503 too; DEADLINE_EXCEEDED from the server (loomgate's upstream
// timeout) a 504; any other status an other status. A call that outlived
// its deadline is a timeout, and one that never reached a server (no
// metadata came back) a connection error.
func grpcAnswer(err, deadline error, header, trailer metadata.MD) answer {
	a := answer{retryAfter: -1}
	if err == nil {
		a.status = http.StatusOK
		return a
	}
	if deadline != nil {
		a.err = context.DeadlineExceeded
		return a
	}
	st, ok := status.FromError(err)
	if !ok {
		a.err = err
		return a
	}
	first := func(key string) string {
		if v := trailer.Get(key); len(v) > 0 {
			return v[0]
		}
		if v := header.Get(key); len(v) > 0 {
			return v[0]
		}
		return ""
	}
	outcome := first("loomgate-outcome")
	switch {
	case strings.HasPrefix(outcome, "rejected_"), st.Code() == codes.ResourceExhausted:
		a.status = http.StatusServiceUnavailable
		a.retryAfter = retryAfterSeconds(first("retry-after"))
	case st.Code() == codes.Unavailable && outcome == "" && len(header) == 0 && len(trailer) == 0:
		a.err = errNoServer{err}
	case st.Code() == codes.Unavailable:
		a.status = http.StatusServiceUnavailable
	case st.Code() == codes.DeadlineExceeded:
		a.status = http.StatusGatewayTimeout
	default:
		a.status = http.StatusInternalServerError
	}
	return a
}

// errNoServer is a call that failed before any server answered it.
type errNoServer struct{ err error }

func (e errNoServer) Error() string { return "no server answered: " + e.err.Error() }
func (e errNoServer) Unwrap() error { return e.err }
