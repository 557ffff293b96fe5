//go:build !linux

package peer

import "net"

// Peek cannot tell without a peek on this platform; clients that leave
// are then noticed only when their response fails to write.
func Peek(net.Conn) State { return Open }

// Quiet cannot tell without a peek on this platform: an idle connection
// is taken as quiet.
func Quiet(net.Conn) bool { return true }
