package proxy

import "net"

// peerState is what a peek at a client's connection tells.
type peerState uint8

const (
	// peerOpen: nothing new, or bytes of a next request waiting.
	peerOpen peerState = iota
	// peerEnded: the client sent its FIN. It closed the connection, or
	// half-closed it and still reads (RFC 9112, 9.6): the two look alike
	// until something is sent to it, which a client that closed answers
	// with a reset.
	peerEnded
	// peerReset: the connection was reset; the client is gone.
	peerReset
)

// peerGone reports whether a client whose request has not been forwarded
// yet is to be taken as gone: it closed, half-closed or reset. Nothing has
// been sent that could tell a half-close from a close, and forwarding the
// request of a client that left is work the upstream does for nobody, so a
// request that waited is dropped on either, as HAProxy does with
// abortonclose.
func peerGone(c net.Conn) bool { return peekPeer(c) != peerOpen }
