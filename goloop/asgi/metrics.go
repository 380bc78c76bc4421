package asgi

import (
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Metrics: a request counter by status class and a latency histogram (time from the
// request's complete head to its response's end), counted in Go; off unless EnableMetrics
// was called (then two clock reads per request). MetricsPath, if set, is answered by Go
// in Prometheus' text format without calling the application.

// LatencyBuckets are the histogram's upper bounds in seconds (Prometheus' defaults).
var LatencyBuckets = [...]float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

type metrics struct {
	path    string
	buckets [len(LatencyBuckets) + 1]atomic.Int64 // non-cumulative; the last is +Inf
	sumNs   atomic.Int64
	count   atomic.Int64
	status  [6]atomic.Int64 // by status class: 1xx .. 5xx, [0] others
}

var epoch = time.Now()

func monoNow() int64 { return int64(time.Since(epoch)) }

// EnableMetrics turns counting on; path (if not "") is served by Go with the metrics in
// Prometheus' text format. Call it before Serve.
func (s *Server) EnableMetrics(path string) { s.metrics = &metrics{path: path} }

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
}

// Metrics returns the counters now.
func (s *Server) Metrics() MetricsSnapshot {
	ms := MetricsSnapshot{Requests: s.Requests(), InFlight: s.InFlight(), Connections: s.Connections()}
	m := s.metrics
	if m == nil {
		return ms
	}
	ms.Enabled = true
	ms.Count = m.count.Load()
	ms.Sum = float64(m.sumNs.Load()) / 1e9
	var cum int64
	for i := range m.buckets {
		cum += m.buckets[i].Load()
		ms.Buckets = append(ms.Buckets, cum)
	}
	for i := range m.status {
		ms.Status[i] = m.status[i].Load()
	}
	return ms
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
