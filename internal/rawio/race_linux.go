//go:build race

package rawio

import "sync/atomic"

// ioSync gives the race detector what it has for net.Conn's own reads and
// writes: what a goroutine did before a write happens before what another
// does after a read. Without it, a program that hands work from one
// goroutine to another through a socket would be reported racing.
var ioSync atomic.Uint64

func beforeWrite() { ioSync.Add(1) }
func afterRead()   { ioSync.Load() }
