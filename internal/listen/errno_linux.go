package listen

import "syscall"

// retryableErrnos are accept's failures that the next accept may not
// meet: exhaustion, and (accept(2)'s advice for TCP) errors that belong to
// the one connection being accepted.
var retryableErrnos = []syscall.Errno{
	syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM,
	syscall.ECONNABORTED, syscall.EINTR, syscall.EAGAIN, syscall.EPROTO, syscall.EPERM,
	syscall.ENETDOWN, syscall.ENOPROTOOPT, syscall.EHOSTDOWN, syscall.ENONET,
	syscall.EHOSTUNREACH, syscall.EOPNOTSUPP, syscall.ENETUNREACH,
}
