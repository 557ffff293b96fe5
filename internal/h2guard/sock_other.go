//go:build !linux

package h2guard

import (
	"net"
	"sync/atomic"
)

// sock reads the client's connection for the guard. Elsewhere than on
// Linux it cannot tell what waits in the socket, and Settle waits only for
// the resets the server has read.
type sock struct {
	active atomic.Bool
}

func (s *sock) init(net.Conn) {}

func (s *sock) read(c net.Conn, p []byte) (int, error) { return c.Read(p) }

func (s *sock) pending() int { return 0 }
