package stub

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	fws "github.com/fasthttp/websocket"
	"github.com/valyala/fasthttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The stub speaks the protocols loomgate proxies besides HTTP/1.1, with
// the same knobs:
//
//   - /ws is a WebSocket echo: each message is answered after waiting for
//     a Pool worker (when there is a pool), ms milliseconds (with to, drawn
//     from ms to to) and iters rounds of CPU work, from the handshake's
//     query (/ws?ms=50&iters=1000).
//   - HTTP/2 with prior knowledge on the same port (what the sidecar
//     forwards as h2c) is gRPC for calls (content-type application/grpc):
//     the service loomgate.stub.v1.Stub, whose unary methods Wait and CPU
//     take a google.protobuf.StringValue with a query ("ms=200",
//     "ms=100&to=300", "iters=1000000") and answer one with what /wait and
//     /cpu answer, through the same pool; and the standard health service,
//     grpc.health.v1.Health. A bad query is INVALID_ARGUMENT. Every other
//     HTTP/2 request is served as HTTP/1.1's is, by the same handler: the
//     lab drives plain h2c (GET /wait?ms=200) as well as gRPC.

// GRPCService is the stub's gRPC service name.
const GRPCService = "loomgate.stub.v1.Stub"

// protocols is the stub's WebSocket and HTTP/2 side.
type protocols struct {
	ws   fasthttp.RequestHandler
	grpc *grpc.Server
	// h2 serves the HTTP/2 connections: gRPC calls go to grpc (its
	// ServeHTTP), other requests to the stub's own handler. One port
	// answers both, as the service behind a sidecar would.
	h2 *http.Server

	mu    sync.Mutex
	conns chan net.Conn
	done  chan struct{}
	shut  bool
}

func (s *Server) newProtocols() *protocols {
	pr := &protocols{conns: make(chan net.Conn), done: make(chan struct{})}
	pr.ws = s.wsEcho
	pr.grpc = grpc.NewServer()
	healthpb.RegisterHealthServer(pr.grpc, health.NewServer())
	method := func(name string, r route) grpc.MethodDesc {
		return grpc.MethodDesc{MethodName: name, Handler: func(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.StringValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			return s.grpcWork(ctx, r, in.GetValue())
		}}
	}
	pr.grpc.RegisterService(&grpc.ServiceDesc{
		ServiceName: GRPCService,
		HandlerType: (*any)(nil),
		Methods:     []grpc.MethodDesc{method("Wait", routeWait), method("CPU", routeCPU)},
	}, s)
	protos := new(http.Protocols)
	protos.SetUnencryptedHTTP2(true)
	pr.h2 = &http.Server{
		Protocols: protos,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
				pr.grpc.ServeHTTP(w, r)
				return
			}
			s.serveHTTP(w, r)
		}),
		// As on the sidecar: streams beyond a connection's limit would
		// wait in the client, where no experiment sees them.
		HTTP2: &http.HTTP2Config{MaxConcurrentStreams: 10000},
	}
	go pr.h2.Serve(pr)
	return pr
}

// serveHTTP serves a plain HTTP/2 request with the HTTP/1.1 handler, so
// that every endpoint's cost is the same whichever protocol asks.
// fasthttp's RequestCtx.Init makes a context outside a server; the stub's
// handler needs only the request line and writes only a status and a
// body. /ws is HTTP/1.1's alone.
func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	var ctx fasthttp.RequestCtx
	var req fasthttp.Request
	req.Header.SetMethod(r.Method)
	req.SetRequestURI(r.URL.RequestURI())
	ctx.Init(&req, nil, nil)
	if routeOf(ctx.Path()) == routeWS {
		http.Error(w, "/ws is a WebSocket: HTTP/1.1 only", http.StatusBadRequest)
		return
	}
	s.handle(&ctx)
	w.Header().Set("Content-Type", string(ctx.Response.Header.ContentType()))
	w.WriteHeader(ctx.Response.StatusCode())
	w.Write(ctx.Response.Body())
}

// serveH2 hands an HTTP/2 connection to the HTTP/2 server.
func (pr *protocols) serveH2(c net.Conn) {
	select {
	case pr.conns <- c:
	case <-pr.done:
		c.Close()
	}
}

// Accept, Close and Addr make protocols the HTTP/2 server's listener.
func (pr *protocols) Accept() (net.Conn, error) {
	select {
	case c := <-pr.conns:
		return c, nil
	case <-pr.done:
		return nil, net.ErrClosed
	}
}

func (pr *protocols) Close() error {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if !pr.shut {
		pr.shut = true
		close(pr.done)
	}
	return nil
}

func (pr *protocols) Addr() net.Addr { return &net.TCPAddr{} }

// shutdown lets requests and calls in flight finish until ctx ends.
func (pr *protocols) shutdown(ctx context.Context) {
	pr.Close()
	// The HTTP/2 server's Shutdown sends each connection a GOAWAY and
	// waits for its streams, gRPC calls included; grpc.Server.Stop then
	// ends what is left of them.
	if pr.h2.Shutdown(ctx) != nil {
		pr.h2.Close()
	}
	pr.grpc.Stop()
}

// grpcWork serves Wait and CPU.
func (s *Server) grpcWork(ctx context.Context, r route, query string) (*wrapperspb.StringValue, error) {
	s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	defer s.requests[r].Inc()
	var args fasthttp.Args
	args.Parse(query)
	n, ms, bad := parseQuery(r, &args)
	if bad != "" {
		return nil, status.Error(codes.InvalidArgument, bad)
	}
	if s.pool != nil {
		if err := s.acquireCtx(ctx, s.pool, &s.poolOcc); err != nil {
			return nil, status.FromContextError(err).Err()
		}
		defer release(s.pool, &s.poolOcc)
	}
	if r == routeCPU {
		return wrapperspb.String("cpu iters=" + strconv.FormatInt(n, 10) + " result=" + strconv.FormatUint(cpuWork(n), 10) + "\n"), nil
	}
	sleepMillis(ms)
	return wrapperspb.String(string(appendMillis([]byte("waited "), ms))), nil
}

// acquireCtx is acquire for a caller that may leave: it waits until ctx
// ends or the stub shuts down.
func (s *Server) acquireCtx(ctx context.Context, sem interface {
	Acquire(context.Context, int64) error
}, occ *occupancy) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(s.ctx, cancel)
	defer stop()
	occ.waiting.Add(1)
	err := sem.Acquire(ctx, 1)
	occ.waiting.Add(-1)
	if err != nil {
		return err
	}
	raise(&occ.peak, occ.inUse.Add(1))
	return nil
}

// upgrader accepts WebSocket handshakes from any origin: the stub is an
// experiment's upstream, not a browser's site.
var upgrader = fws.FastHTTPUpgrader{CheckOrigin: func(*fasthttp.RequestCtx) bool { return true }}

// wsEcho is /ws.
func (s *Server) wsEcho(ctx *fasthttp.RequestCtx) {
	args := ctx.QueryArgs()
	ms, bad := arg(args, paramMS, false)
	if bad == "" {
		ms, bad = spread(args, ms)
	}
	var iters int64
	if bad == "" {
		iters, bad = arg(args, paramIters, false)
	}
	if bad != "" {
		ctx.Error(bad, fasthttp.StatusBadRequest)
		return
	}
	_ = upgrader.Upgrade(ctx, func(c *fws.Conn) {
		defer c.Close()
		c.SetReadLimit(1 << 20)
		for {
			typ, msg, err := c.ReadMessage()
			if err != nil {
				return
			}
			if s.pool != nil {
				if s.acquireCtx(context.Background(), s.pool, &s.poolOcc) != nil {
					_ = c.WriteControl(fws.CloseMessage, fws.FormatCloseMessage(fws.CloseGoingAway, "stub shutting down"), time.Now().Add(time.Second))
					return
				}
			}
			sleepMillis(ms)
			cpuWork(iters)
			if s.pool != nil {
				release(s.pool, &s.poolOcc)
			}
			if err := c.WriteMessage(typ, msg); err != nil {
				return
			}
		}
	})
}
