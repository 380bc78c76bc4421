package httpserver

import (
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// An accept error is counted each time and warned about at most once per acceptWarnEvery,
// the next warning saying how many were not.
func TestAcceptErrorWarnings(t *testing.T) {
	var woken int
	s := New(Config{OnWarning: func() { woken++ }})
	emfile := os.NewSyscallError("accept4", unix.EMFILE)
	for i := 0; i < 5; i++ {
		s.acceptFailed(emfile)
	}
	if !s.HasWarnings() || woken != 1 {
		t.Fatal(s.HasWarnings(), woken)
	}
	w := s.TakeWarnings()
	want := "accept4() failed (24: Too many open files): new connections wait in the listen queue"
	if len(w) != 1 || !strings.HasPrefix(w[0], want) || !strings.Contains(w[0], "ulimit -n") {
		t.Fatalf("%q", w)
	}
	if s.HasWarnings() || len(s.TakeWarnings()) != 0 {
		t.Fatal("warnings left")
	}
	if n := s.Metrics().AcceptErrors; n != 5 {
		t.Fatal(n)
	}
	if p := s.Metrics().Prometheus(); !strings.Contains(p, "\ngoloop_accept_errors_total 5\n") {
		t.Fatal(p)
	}
	// past the interval: one more warning, with the count of those suppressed
	s.warn.last = time.Now().Add(-acceptWarnEvery - time.Second)
	s.acceptFailed(os.NewSyscallError("accept4", unix.ENFILE))
	w = s.TakeWarnings()
	if len(w) != 1 || !strings.HasPrefix(w[0], "accept4() failed (23: Too many open files in system)") ||
		!strings.Contains(w[0], "(and 4 more since the last such warning)") || woken != 2 {
		t.Fatalf("%q %d", w, woken)
	}
}
