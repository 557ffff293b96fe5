//go:build !linux

package sniff

import "net"

// peek is not implemented here: every connection is served as HTTP/1.1.
func peek(net.Conn, []byte, int, bool) (int, error, bool) { return 0, nil, false }
