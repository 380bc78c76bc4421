package httpserver

// deadline.go: slow clients. A connection's reader has one deadline (the goroutine
// driver's read deadline, the loop driver's Conn.deadline on the server's timerfd), and
// what it bounds depends on what the connection waits for from its client:
//   - nothing (between requests) or a busy connection (requests in flight): the keep-alive
//     timeout, pushed by every read; a busy connection is given another period, and so is
//     one whose output went out since (idle for less than the timeout);
//   - a request head: HeadTimeout from the read that brought its first byte, not pushed by
//     later reads (a client trickling a head a byte at a time cannot keep its
//     connection forever); then 408 and close;
//   - a request body (HTTP/1.1): an average of BodyMinRate bytes per second after
//     BodyGrace, from the head's end: the deadline is start + grace + received/rate, so a
//     client holds the connection for t seconds only by sending rate*t bytes; then 408 (or
//     a plain close when the response has begun) and the application sees a disconnect.
// The head's and the body's clocks stop while reading is paused (the application has not
// taken what came, or the pipeline is full) and while a 100 Continue is still owed: they
// start again when the reader resumes. HTTP/2's header blocks: h2.go (frameDeadline).

import "time"

const (
	defaultHeadTimeout = 10 * time.Second
	defaultBodyMinRate = 240 // bytes per second (Kestrel's MinRequestBodyDataRate)
)

// The reader's deadline bounds (readDeadlineLocked).
const (
	dlIdle = iota // the keep-alive timeout (idle, or busy: extended)
	dlHead        // a request head's
	dlBody        // a request body's minimum rate
)

func (cfg *Config) setDeadlineDefaults() {
	if cfg.HeadTimeout == 0 {
		cfg.HeadTimeout = defaultHeadTimeout
	}
	if cfg.BodyMinRate == 0 {
		cfg.BodyMinRate = defaultBodyMinRate
	}
	if cfg.BodyGrace <= 0 {
		cfg.BodyGrace = cfg.HeadTimeout
		if cfg.BodyGrace <= 0 {
			cfg.BodyGrace = defaultHeadTimeout
		}
	}
}

// SetSlowClients sets HeadTimeout and BodyMinRate (Config's meaning, 0: the default; the
// body's grace follows the head's timeout) and H2Only. Call it before ListenFd/Serve and
// SetTLS.
func (s *Server) SetSlowClients(head time.Duration, minRate int, h2only bool) {
	s.cfg.HeadTimeout, s.cfg.BodyMinRate, s.cfg.BodyGrace = head, minRate, 0
	s.cfg.H2Only = h2only && !s.cfg.NoH2
	s.cfg.setDeadlineDefaults()
}

// readDeadlineLocked is when the reader must next look at c, and which bound that is
// (c.mu held; the reader's: it starts the head's and body's clocks at now).
func (c *Conn) readDeadlineLocked(now time.Time) (time.Time, int) {
	cfg := &c.s.cfg
	r := c.cur
	if r == nil || c.paused || c.stopRead {
		c.headOf, c.bodyOf = nil, nil // a head or body after a pause gets its time again
		return now.Add(cfg.KeepAliveTimeout), dlIdle
	}
	if !r.headDone {
		if cfg.HeadTimeout < 0 {
			return now.Add(cfg.KeepAliveTimeout), dlIdle
		}
		if c.headOf != r {
			c.headOf, c.headAt = r, now
		}
		return c.headAt.Add(cfg.HeadTimeout), dlHead
	}
	if !r.dispatched || r.bodyDone || r.expect100 || cfg.BodyMinRate < 0 {
		c.bodyOf = nil
		return now.Add(cfg.KeepAliveTimeout), dlIdle
	}
	if c.bodyOf != r {
		c.bodyOf, c.bodyAt, c.bodyN = r, now, 0
	}
	credit := time.Duration(float64(c.bodyN) / float64(cfg.BodyMinRate) * float64(time.Second))
	return c.bodyAt.Add(cfg.BodyGrace + credit), dlBody
}

// overdueLocked: the reader's deadline passed (c.mu held). kind: the bound that expired
// (dlHead, dlBody: the caller answers with timedOut), or dlIdle with next: look again
// then (busy, or the bound is later), or a zero next: idle, the connection closes.
// The keep-alive deadline is set by reads, so a connection whose response went out after
// it was set (a slow application, or a loop busy with other connections) has been idle
// for less than the timeout: it gets another period, and closes between one and two
// timeouts after its last response, never sooner than one (a client sending its next
// request would meet the close).
func (c *Conn) overdueLocked(now time.Time) (kind int, next time.Time) {
	d, kind := c.readDeadlineLocked(now)
	if kind != dlIdle {
		if now.Before(d) {
			return dlIdle, d
		}
		return kind, time.Time{}
	}
	if c.busyLocked() || c.answered {
		c.answered = false
		return dlIdle, d
	}
	return dlIdle, time.Time{}
}

// timedOut ends the request whose head or body did not come in time (kind: dlHead,
// dlBody; the reader's, c.mu not held): counted, answered 408 after the responses before
// it (RFC 9110 15.5.9; connection: close) unless its response has begun (then the
// connection closes), and reading stops.
func (c *Conn) timedOut(kind int) {
	r := c.cur
	c.cur, c.headOf, c.bodyOf = nil, nil, nil
	c.stopRead = true
	if kind == dlHead {
		c.s.ctr.headTimeouts.Add(1)
		c.answer(408, "Request Timeout")
		return
	}
	c.s.ctr.bodyTimeouts.Add(1)
	c.mu.Lock()
	r.lost = true
	c.wakeLocked(r, &c.batch)
	if r.headSent || c.closed {
		c.lostLocked() // part of its response is out: a 408 cannot follow it
		c.mu.Unlock()
		c.pushBatch(true)
		return
	}
	c.dropLocked(r) // not answered by the application: the 408 takes its place
	c.mu.Unlock()
	c.pushBatch(true)
	c.answer(408, "Request Timeout")
}
