// Package rawio gives a TCP connection reads and writes that do not wake
// the runtime's monitor thread.
//
// Every read or write through net.Conn is a system call announced to the
// scheduler (entersyscall), so that the runtime's monitor (sysmon) can
// hand the P to another thread should the call block. When every P is
// idle the monitor sleeps deeply, and the first announced call after the
// pause wakes it: a sidecar at a moderate rate, whose P idles between
// requests, paid a futex wake-up, two of the monitor's sleeps and their
// context switches on every request (0.75 context switches a request
// where HAProxy makes 0.29; a fifth of the process's CPU time at 5000
// rps on one CPU).
//
// A socket the netpoller watches is non-blocking: its read and write
// return at once, with data or EAGAIN, and cannot hold the P. Conn makes
// them as raw system calls inside syscall.RawConn's Read and Write, which
// wait for readiness and honour deadlines and Close as net.Conn does.
// Errors come as net.Conn's would: *net.OpError for a failure, a
// timeout's Timeout() true, io.EOF at the peer's end of stream.
//
// A Conn's deadlines are its own, not the runtime's: setting one stores a
// number, and one goroutine meets them, at most a few milliseconds late
// (see deadline_linux.go). A proxy sets several on every request and
// almost never meets one.
package rawio
