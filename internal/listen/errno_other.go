//go:build !linux

package listen

import "syscall"

// retryableErrnos are accept's failures that the next accept may not
// meet: exhaustion, or a connection aborted before it was accepted.
var retryableErrnos = []syscall.Errno{
	syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM,
	syscall.ECONNABORTED, syscall.EINTR, syscall.EAGAIN,
}
