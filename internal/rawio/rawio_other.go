//go:build !linux

package rawio

import "net"

// Wrap returns c: elsewhere than Linux, the connection's own reads and
// writes serve.
func Wrap(c net.Conn) net.Conn { return c }

// WrapIn returns c: elsewhere than Linux, the connection's own reads and
// writes serve, and g does not end them.
func WrapIn(c net.Conn, g *Group) net.Conn { return c }

// A Group is a set of connections whose waits can be ended together; only
// on Linux, where WrapIn makes its members.
type Group struct{}

// Cut does nothing elsewhere than Linux.
func (g *Group) Cut() {}
