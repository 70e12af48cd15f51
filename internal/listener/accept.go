package listener

import (
	"errors"
	"net"
	"syscall"
	"time"
)

// Accept back-off bounds, those of net/http's Server.Serve.
const (
	minAcceptBackoff = 5 * time.Millisecond
	maxAcceptBackoff = time.Second
)

// temporaryAcceptError reports whether an Accept error is worth retrying:
// resource exhaustion (EMFILE, ENFILE, ENOBUFS, ENOMEM), a connection that
// died in the backlog (ECONNABORTED, ECONNRESET, EPROTO), an interrupted or
// would-block call, or a timeout. Named errnos rather than the deprecated
// net.Error.Temporary, so the set is visible here.
func temporaryAcceptError(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	for _, e := range []syscall.Errno{
		syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM,
		syscall.ECONNABORTED, syscall.ECONNRESET, syscall.EPROTO,
		syscall.EINTR, syscall.EAGAIN,
	} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// nextBackoff doubles d within [minAcceptBackoff, maxAcceptBackoff].
func nextBackoff(d time.Duration) time.Duration {
	if d == 0 {
		return minAcceptBackoff
	}
	return min(2*d, maxAcceptBackoff)
}

// PermanentError wraps the error that ended a listener. It is not a
// temporary net.Error, so http.Server.Serve returns it instead of retrying.
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string { return "listener failed permanently: " + e.Err.Error() }
func (e *PermanentError) Unwrap() error { return e.Err }
