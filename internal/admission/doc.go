// Package admission is the one way a request meets admission, whatever its
// protocol: an HTTP/1.1 request, an HTTP/2 stream or gRPC call, the
// handshake of an upgrade, and (for it needs nothing else) a stream of a
// frame-level relay.
//
// The protocol reads a request and describes it in a Request: its method
// and target, its declared body, its client's own deadline. The Gate then
// classifies it by route, once, before admission; reserves its bytes;
// admits it under the limiter.Policy, at once or after a wait watched by
// the protocol (Client), or refuses it, naming why as one outcome.Kind;
// keeps its times; gives back its permit and bytes; and finishes its one
// outcome.Record for the Observer. The protocol only reads, writes and
// frames: it answers as the Kind says, and notes what the upstream and the
// client did.
//
// Nothing here knows a connection, a header block or a frame, so that the
// seam serves any protocol that can read a method and a target and watch
// its client; and the policy sees the Request, so that what it may later
// read of one (a priority level, a flow: see limiter.Request) comes through
// the same seam, filled in here, with no protocol to change.
package admission
