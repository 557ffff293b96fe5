// Package peer tells what the client at the other end of a connection has
// done to it (closed, half-closed, reset) without reading it, and watches
// the connections of requests that wait for admission so that a client who
// leaves ends its wait. fasthttp offers neither: a connection is not read
// while its handler runs.
package peer

import "net"

// State is what a peek at a client's connection tells.
type State uint8

const (
	// Open: nothing new, or bytes of a next request waiting.
	Open State = iota
	// Ended: the client sent its FIN. It closed the connection, or
	// half-closed it and still reads (RFC 9112, 9.6): the two look alike
	// until something is sent to it, which a client that closed answers
	// with a reset.
	Ended
	// Reset: the connection was reset; the client is gone.
	Reset
)

// Gone reports whether a client whose request has not been forwarded
// yet is to be taken as gone: it closed, half-closed or reset. Nothing has
// been sent that could tell a half-close from a close, and forwarding the
// request of a client that left is work the upstream does for nobody, so a
// request that waited is dropped on either, as HAProxy does with
// abortonclose.
func Gone(c net.Conn) bool { return Peek(c) != Open }
