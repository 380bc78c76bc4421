package httpserver

// accepterr.go: an accept that fails for want of a resource (EMFILE: the process' descriptor
// limit, ENFILE: the system's, ENOBUFS, ENOMEM) leaves the connection waiting in the
// listening socket's queue; both drivers pause the listener for a while and accept again
// by themselves. An operator must see why connections wait: each such error is counted
// (the metrics' goloop_accept_errors_total) and a warning is logged, as nginx logs
// "accept4() failed (24: Too many open files)", at most one per acceptWarnEvery, the
// next one saying how many were not logged in between. Go never calls Python: the warning
// waits in the server (TakeWarnings) and Config.OnWarning asks the loop thread to log it.

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// acceptWarnEvery is the least time between two accept warnings.
const acceptWarnEvery = 10 * time.Second

type warnings struct {
	mu         sync.Mutex
	msgs       []string  // waiting for TakeWarnings
	last       time.Time // when the last accept warning was queued
	suppressed int64     // accept errors since then, not logged
	pending    atomic.Bool
}

// acceptFailed counts an accept error that pauses a listener and queues its warning,
// unless one was queued less than acceptWarnEvery ago (any goroutine).
func (s *Server) acceptFailed(err error) {
	s.ctr.acceptErrors.Add(1)
	w := &s.warn
	now := time.Now()
	w.mu.Lock()
	if !w.last.IsZero() && now.Sub(w.last) < acceptWarnEvery {
		w.suppressed++
		w.mu.Unlock()
		return
	}
	msg := acceptErrorText(err)
	if w.suppressed > 0 {
		msg += fmt.Sprintf(" (and %d more since the last such warning)", w.suppressed)
	}
	w.msgs = append(w.msgs, msg)
	w.last, w.suppressed = now, 0
	w.pending.Store(true)
	w.mu.Unlock()
	if f := s.cfg.OnWarning; f != nil {
		f()
	}
}

// acceptErrorText is nginx's wording for err ("accept4() failed (24: Too many open
// files)") and what it means for the connections.
func acceptErrorText(err error) string {
	var errno syscall.Errno
	what := err.Error()
	if errors.As(err, &errno) {
		what = errno.Error() // strerror's text, lower-cased by Go: as strerror says it
		what = fmt.Sprintf("%d: %s%s", int(errno), strings.ToUpper(what[:min(1, len(what))]), what[min(1, len(what)):])
	}
	hint := ""
	if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
		hint = ", raise the limit of open files (ulimit -n)"
	}
	return fmt.Sprintf("accept4() failed (%s): new connections wait in the listen queue until "+
		"the server can accept again%s", what, hint)
}

// HasWarnings tells whether warnings wait for TakeWarnings (one atomic load).
func (s *Server) HasWarnings() bool { return s.warn.pending.Load() }

// TakeWarnings returns the warnings queued since the last call, for the caller to log.
func (s *Server) TakeWarnings() []string {
	w := &s.warn
	w.mu.Lock()
	msgs := w.msgs
	w.msgs = nil
	w.pending.Store(false)
	w.mu.Unlock()
	return msgs
}
