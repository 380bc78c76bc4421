package httpserver

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// Metrics: a request counter by status class and a latency histogram (time from the
// request's complete head to its response's end), counted in Go; off unless EnableMetrics
// was called (then two clock reads per request). MetricsPath, if set, is answered by Go
// in Prometheus' text format without calling the application.
//
// With several worker processes (EnableSharedMetrics) each keeps its counters in its slot
// of a file the master shares with them all (mmap MAP_SHARED, atomic adds), and a snapshot
// sums the slots: the whole server's counts. The file (little-endian int64s):
//
//	header, SharedHeaderSize bytes: [0] SharedMagic, [1] slots in use (the master raises it
//	        before a worker starts on a new slot)
//	slot i at SharedHeaderSize + i*SharedSlotSize: a counters struct
//
// A restarted worker takes over its predecessor's slot, so the totals never go back; the
// master zeroes the slot's gauges (in_flight, connections: words 1 and 2) when its worker
// exits.

// LatencyBuckets are the histogram's upper bounds in seconds (Prometheus' defaults).
var LatencyBuckets = [...]float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// The shared file's layout (pyshim/goloop/serve/workers.py writes the header).
const (
	SharedHeaderSize = 256
	SharedSlotSize   = 256
	SharedMagic      = 0x31435254454d4c47 // "GLMETRC1"
)

// counters is the layout of a slot: one process' counters.
type counters struct {
	requests atomic.Int64 // requests dispatched to the application, ever
	inflight atomic.Int64 // gauge: dispatched, application not done
	conns    atomic.Int64 // gauge: open connections
	count    atomic.Int64 // responses completed
	sumNs    atomic.Int64
	status   [6]atomic.Int64                       // by status class: 1xx .. 5xx, [0] others
	buckets  [len(LatencyBuckets) + 1]atomic.Int64 // non-cumulative; the last is +Inf
	// requests ended by a deadline (deadline.go), counted whether metrics are on or not
	headTimeouts atomic.Int64 // heads not complete within HeadTimeout (HTTP/2: header blocks)
	bodyTimeouts atomic.Int64 // bodies slower than BodyMinRate
	respTimeouts atomic.Int64 // connections whose client read slower than RespMinRate
	// accepts that failed for want of a resource (EMFILE, ENFILE, ...: accepterr.go)
	acceptErrors atomic.Int64
}

var _ [SharedSlotSize - unsafe.Sizeof(counters{})]byte // a slot holds the counters

type metrics struct {
	path string
	*counters
	shared []byte // the shared file's mapping (nil: this process counts alone)
}

// useCounters makes ctr the server's counters (before it serves).
func (s *Server) useCounters(ctr *counters) {
	s.ctr, s.requests, s.inflight = ctr, &ctr.requests, &ctr.inflight
}

var epoch = time.Now()

func monoNow() int64 { return int64(time.Since(epoch)) }

// EnableMetrics turns counting on; path (if not "") is served by Go with the metrics in
// Prometheus' text format. Call it before Serve.
func (s *Server) EnableMetrics(path string) { s.metrics = &metrics{path: path, counters: s.ctr} }

// EnableSharedMetrics is EnableMetrics with the counters in slot of the shared file fd
// (the layout above; fd may be closed afterwards). Call it before Serve.
func (s *Server) EnableSharedMetrics(path string, fd int, slot int) error {
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return os.NewSyscallError("fstat", err)
	}
	nslots := (int(st.Size) - SharedHeaderSize) / SharedSlotSize
	if slot < 0 || slot >= nslots {
		return fmt.Errorf("metrics slot %d not in the shared file (%d slots)", slot, max(nslots, 0))
	}
	mem, err := syscall.Mmap(fd, 0, int(st.Size), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return os.NewSyscallError("mmap", err)
	}
	if word(mem, 0).Load() != SharedMagic {
		syscall.Munmap(mem)
		return errors.New("the shared metrics file has no goloop header")
	}
	// The mapping lives as long as the process: the counters may be read after the server.
	s.useCounters(slotAt(mem, slot))
	s.metrics = &metrics{path: path, counters: s.ctr, shared: mem}
	return nil
}

// word is the int64 at byte offset off of the mapping (8-aligned: the mapping is).
func word(mem []byte, off int) *atomic.Int64 { return (*atomic.Int64)(unsafe.Pointer(&mem[off])) }

// observe records a completed response (the application's thread, c.mu held).
func (m *metrics) observe(r *Request) {
	d := monoNow() - r.t0
	if d < 0 {
		d = 0
	}
	sec := float64(d) / 1e9
	i := 0
	for i < len(LatencyBuckets) && sec > LatencyBuckets[i] {
		i++
	}
	m.buckets[i].Add(1)
	m.sumNs.Add(d)
	m.count.Add(1)
	cls := r.status / 100
	if cls < 1 || cls > 5 {
		cls = 0
	}
	m.status[cls].Add(1)
}

// MetricsSnapshot is the state of the counters.
type MetricsSnapshot struct {
	Enabled     bool
	Count       int64    // responses completed (application requests)
	Sum         float64  // seconds, all of them together
	Buckets     []int64  // cumulative counts, one per LatencyBuckets bound, then +Inf
	Status      [6]int64 // by status class ([0]: outside 100-599)
	Requests    int64    // requests dispatched to the application, ever
	InFlight    int
	Connections int
	// requests ended because their head (HeadTimeouts) or body (BodyTimeouts) came too
	// slowly (deadline.go)
	HeadTimeouts int64
	BodyTimeouts int64
	// connections dropped because their client read the response too slowly (writerate.go)
	RespTimeouts int64
	// accepts that failed for want of a resource (EMFILE: the descriptor limit, ...)
	AcceptErrors int64
	// response bytes this process' connections hold in Go's memory, not yet written
	// (Queued: their outputs and HTTP/2 streams' copies; held bodies aside)
	Queued int64
}

// slots are the counters a snapshot sums: the shared file's slots in use, else this
// process' own (s.ctr: the same requests, inflight and conns as Server's accessors).
func (m *metrics) slots() []*counters {
	if m.shared == nil {
		return []*counters{m.counters}
	}
	n := max(0, min(int(word(m.shared, 8).Load()), (len(m.shared)-SharedHeaderSize)/SharedSlotSize))
	slots := make([]*counters, n)
	for i := range slots {
		slots[i] = slotAt(m.shared, i)
	}
	return slots
}

// slotAt is slot i's counters in the shared file's mapping mem.
func slotAt(mem []byte, i int) *counters {
	return (*counters)(unsafe.Pointer(&mem[SharedHeaderSize+i*SharedSlotSize]))
}

// Metrics returns the counters now: the whole server's with shared metrics (every
// worker's slot summed), this process' otherwise.
func (s *Server) Metrics() MetricsSnapshot {
	ms := MetricsSnapshot{Requests: s.Requests(), InFlight: s.InFlight(), Connections: s.Connections(),
		HeadTimeouts: s.ctr.headTimeouts.Load(), BodyTimeouts: s.ctr.bodyTimeouts.Load(),
		RespTimeouts: s.ctr.respTimeouts.Load(), AcceptErrors: s.ctr.acceptErrors.Load(), Queued: s.Queued()}
	m := s.metrics
	if m == nil {
		return ms
	}
	ms = MetricsSnapshot{Enabled: true, Buckets: make([]int64, len(LatencyBuckets)+1), Queued: ms.Queued}
	var sumNs int64
	for _, c := range m.slots() {
		ms.Requests += c.requests.Load()
		ms.InFlight += int(c.inflight.Load())
		ms.Connections += int(c.conns.Load())
		ms.Count += c.count.Load()
		ms.HeadTimeouts += c.headTimeouts.Load()
		ms.BodyTimeouts += c.bodyTimeouts.Load()
		ms.RespTimeouts += c.respTimeouts.Load()
		ms.AcceptErrors += c.acceptErrors.Load()
		sumNs += c.sumNs.Load()
		for i := range c.buckets {
			ms.Buckets[i] += c.buckets[i].Load()
		}
		for i := range c.status {
			ms.Status[i] += c.status[i].Load()
		}
	}
	ms.Sum = float64(sumNs) / 1e9
	for i := 1; i < len(ms.Buckets); i++ { // cumulative
		ms.Buckets[i] += ms.Buckets[i-1]
	}
	return ms
}

// Queued is how many response bytes this process' connections hold in Go's memory, not
// yet written: each connection's output, and its HTTP/2 streams' copies (held bodies, the
// application's memory, aside). Each connection's lock is taken in turn (not the
// server's with it: a connection takes the server's under its own when it goes).
func (s *Server) Queued() int64 {
	s.mu.Lock()
	conns := make([]*Conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	var n int64
	for _, c := range conns {
		c.mu.Lock()
		if h, ok := c.next.(*h2Conn); ok {
			n += int64(h.queuedLocked())
		} else if c.q != nil { // HTTP/3: its streams' queues
			n += int64(c.q.queued)
		} else {
			n += int64(len(c.out) + c.heldLocked())
		}
		c.mu.Unlock()
	}
	return n
}

func fmtFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// Prometheus is the snapshot in Prometheus' text exposition format.
func (ms MetricsSnapshot) Prometheus() string {
	var b strings.Builder
	b.WriteString("# HELP goloop_requests_total Requests dispatched to the application.\n")
	b.WriteString("# TYPE goloop_requests_total counter\n")
	fmt.Fprintf(&b, "goloop_requests_total %d\n", ms.Requests)
	b.WriteString("# HELP goloop_requests_in_flight Requests whose application call has not returned.\n")
	b.WriteString("# TYPE goloop_requests_in_flight gauge\n")
	fmt.Fprintf(&b, "goloop_requests_in_flight %d\n", ms.InFlight)
	b.WriteString("# HELP goloop_connections Open HTTP connections.\n")
	b.WriteString("# TYPE goloop_connections gauge\n")
	fmt.Fprintf(&b, "goloop_connections %d\n", ms.Connections)
	b.WriteString("# HELP goloop_request_timeouts_total Requests ended because their head or body came, or their response was read, too slowly.\n")
	b.WriteString("# TYPE goloop_request_timeouts_total counter\n")
	fmt.Fprintf(&b, "goloop_request_timeouts_total{phase=\"head\"} %d\n", ms.HeadTimeouts)
	fmt.Fprintf(&b, "goloop_request_timeouts_total{phase=\"body\"} %d\n", ms.BodyTimeouts)
	fmt.Fprintf(&b, "goloop_request_timeouts_total{phase=\"response\"} %d\n", ms.RespTimeouts)
	b.WriteString("# HELP goloop_accept_errors_total Accepts that failed for want of a resource (EMFILE: the open files limit, ENFILE, ENOBUFS, ENOMEM).\n")
	b.WriteString("# TYPE goloop_accept_errors_total counter\n")
	fmt.Fprintf(&b, "goloop_accept_errors_total %d\n", ms.AcceptErrors)
	if !ms.Enabled {
		return b.String()
	}
	b.WriteString("# HELP goloop_responses_total Responses completed, by status class.\n")
	b.WriteString("# TYPE goloop_responses_total counter\n")
	for i := 1; i <= 5; i++ {
		fmt.Fprintf(&b, "goloop_responses_total{status=\"%dxx\"} %d\n", i, ms.Status[i])
	}
	if ms.Status[0] > 0 {
		fmt.Fprintf(&b, "goloop_responses_total{status=\"other\"} %d\n", ms.Status[0])
	}
	b.WriteString("# HELP goloop_request_duration_seconds From the request's head to the end of its response.\n")
	b.WriteString("# TYPE goloop_request_duration_seconds histogram\n")
	for i, le := range LatencyBuckets {
		fmt.Fprintf(&b, "goloop_request_duration_seconds_bucket{le=\"%s\"} %d\n", fmtFloat(le), ms.Buckets[i])
	}
	fmt.Fprintf(&b, "goloop_request_duration_seconds_bucket{le=\"+Inf\"} %d\n", ms.Buckets[len(LatencyBuckets)])
	fmt.Fprintf(&b, "goloop_request_duration_seconds_sum %s\n", fmtFloat(ms.Sum))
	fmt.Fprintf(&b, "goloop_request_duration_seconds_count %d\n", ms.Count)
	return b.String()
}

// serveMetrics answers r (a GET or HEAD of the metrics path) from Go; false: r is not one.
func (c *Conn) serveMetrics(r *Request) bool {
	m := c.s.metrics
	if m.path == "" || string(r.Path()) != m.path {
		return false
	}
	if meth := r.Method(); string(meth) != "GET" && string(meth) != "HEAD" {
		return false
	}
	body := c.s.Metrics().Prometheus()
	r.status = 200
	r.started, r.bodyDone, r.headSent = true, true, true
	r.hdr = append(r.hdr, "content-type: text/plain; version=0.0.4; charset=utf-8\r\n"...)
	r.out = r.appendHead(r.out, len(body), false)
	if !r.head {
		r.out = append(r.out, body...)
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return true
	}
	r.done = true
	c.inflight = append(c.inflight, r)
	c.advanceLocked()
	c.mu.Unlock()
	c.flush()
	return true
}
