package httpserver

// writerate.go: clients slow to read responses (Kestrel's MinResponseDataRate). While a
// connection's output waits for its socket (the kernel's send buffer is full: the loop
// driver armed write interest, or the writer goroutine blocks), a clock runs: from the
// moment the socket stopped taking bytes (wAt), the client must read RespMinRate bytes per
// second on average after RespGrace: the deadline is wAt + grace + written/rate, where
// written counts what the socket took since wAt. The clock stops when the output drains
// (a slow application is not the client's fault). Past the deadline the connection is
// lost: the requests in flight see a disconnect (ASGI: http.disconnect; a WSGI pool
// thread waiting to send is freed, its iterable closed), the held bodies and files are
// released, and respTimeouts counts it. Together with the output's bound (WriteBuffer:
// a sender waits past it) this bounds both the memory and the time a client that does
// not read can take.
//
// The clock is two atomics (no lock): the TLS sink's blocking writes report their
// progress without the connection's lock (tls.go, writeAll's more).

import (
	"errors"
	"os"
	"time"
)

const (
	defaultRespMinRate = 240 // bytes per second (Kestrel's MinResponseDataRate)
	defaultRespGrace   = 5 * time.Second
)

// SetMinResponseRate sets RespMinRate (bytes per second; 0: the default, negative: none)
// and RespGrace (0: the default). Call it before ListenFd/Serve.
func (s *Server) SetMinResponseRate(rate int, grace time.Duration) {
	s.cfg.RespMinRate, s.cfg.RespGrace = rate, grace
	s.cfg.setRespDefaults()
}

func (cfg *Config) setRespDefaults() {
	if cfg.RespMinRate == 0 {
		cfg.RespMinRate = defaultRespMinRate
	}
	if cfg.RespGrace <= 0 {
		cfg.RespGrace = defaultRespGrace
	}
}

// stall: the socket stopped taking the output: the clock starts unless it runs (any
// thread: atomics). started: it starts now and has a deadline (RespMinRate on).
func (c *Conn) stall() (started bool) {
	if c.s.cfg.RespMinRate < 0 || c.wAt.Load() != 0 {
		return false
	}
	c.wN.Store(0)
	c.wAt.Store(max(monoNow(), 1))
	return true
}

// wrote counts n bytes the socket took (any thread).
func (c *Conn) wrote(n int) {
	if n > 0 && c.wAt.Load() != 0 {
		c.wN.Add(int64(n))
	}
}

// unstall: the output drained; the clock stops (a load, not a store, when it did not run:
// every drained response passes here).
func (c *Conn) unstall() {
	if c.wAt.Load() != 0 {
		c.wAt.Store(0)
	}
}

// writeDeadline is when the output must have made its progress (zero: no clock).
func (c *Conn) writeDeadline() time.Time {
	at := c.wAt.Load()
	if at == 0 || c.s.cfg.RespMinRate < 0 {
		return time.Time{}
	}
	cfg := &c.s.cfg
	credit := time.Duration(float64(c.wN.Load()) / float64(cfg.RespMinRate) * float64(time.Second))
	return epoch.Add(time.Duration(at) + cfg.RespGrace + credit)
}

// writeOverdue: the output's deadline passed (now).
func (c *Conn) writeOverdue(now time.Time) bool {
	d := c.writeDeadline()
	return !d.IsZero() && !now.Before(d)
}

// respTimedOutLocked ends a loop-mode connection whose client reads too slowly (c.mu held).
func (c *Conn) respTimedOutLocked() {
	c.s.ctr.respTimeouts.Add(1)
	c.unstall()
	c.writing = false
	c.lostLocked()
}

// minDeadline is the earlier of a and b, ignoring zeros.
func minDeadline(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

// armWriteDeadline starts the clock and sets a goroutine-mode socket's write deadline to
// its (the writer goroutine, before its blocking writes).
func (c *Conn) armWriteDeadline() {
	if c.nc != nil && c.stall() {
		c.nc.SetWriteDeadline(c.writeDeadline())
	}
}

// disarmWriteDeadline: the writer goroutine is done; other writes on the socket (a TLS
// handshake's, an HTTP/2 GOAWAY's) have no deadline of the clock's.
func (c *Conn) disarmWriteDeadline() {
	if c.nc != nil && c.s.cfg.RespMinRate >= 0 {
		c.unstall()
		c.nc.SetWriteDeadline(time.Time{})
	}
}

// writeGoesOn tells, after a blocking write failed with err, whether only the socket's
// deadline passed while the client still reads fast enough (its progress counted with
// wrote): the deadline moves later and the write goes on (true).
func (c *Conn) writeGoesOn(err error) bool {
	if !errors.Is(err, os.ErrDeadlineExceeded) || c.writeOverdue(time.Now()) {
		return false
	}
	c.nc.SetWriteDeadline(c.writeDeadline())
	return true
}

// writeFailedLocked ends the connection after the writer goroutine's write failed (c.mu
// held): a client past the clock's deadline is counted.
func (c *Conn) writeFailedLocked(err error) {
	c.writing = false
	if errors.Is(err, os.ErrDeadlineExceeded) && c.writeOverdue(time.Now()) {
		c.s.ctr.respTimeouts.Add(1)
	}
	c.unstall()
	c.lostLocked()
}
