// Command echoclient is a small vmbench-style load generator for echo servers.
//
// It opens -conns connections to a TCP address (-addr) or a unix socket
// (-unix). Each connection sends a message of -size bytes and waits for the
// whole echo before sending the next one. After a warm-up of -warmup seconds
// it counts completed round trips for -duration seconds, verifies every echoed
// byte, and prints one JSON line:
//
//	{"rps":..., "p50_us":..., "p99_us":..., "bytes":..., "errors":...}
//
// With -ws PATH each connection first makes a WebSocket handshake (GET PATH) and each
// message is a binary WebSocket message (a masked frame) whose echo is one frame back:
// an ASGI server's WebSocket echo (bench/ws_bench.py).
//
// rps is round trips per second during the measured window, p50_us/p99_us are
// round-trip latencies in microseconds, bytes is the number of echoed bytes
// received during the window and errors counts connection failures, short
// reads, timeouts and mismatched echoes (over warm-up and measurement).
package main

import (
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

const (
	phaseWarmup int32 = iota
	phaseMeasure
	phaseStop
)

type result struct {
	RPS    float64 `json:"rps"`
	P50    float64 `json:"p50_us"`
	P99    float64 `json:"p99_us"`
	Bytes  int64   `json:"bytes"`
	Errors int64   `json:"errors"`
	Conns  int     `json:"conns"`
	Size   int     `json:"size"`
	Secs   float64 `json:"duration_s"`
	Error  string  `json:"error,omitempty"`
}

type worker struct {
	lat    []time.Duration // round-trip latencies measured in the window
	bytes  int64
	errors int64
	first  string // first error message seen
}

func main() {
	addr := flag.String("addr", "127.0.0.1:25000", "TCP address host:port of the echo server")
	unixPath := flag.String("unix", "", "unix socket path (overrides -addr)")
	conns := flag.Int("conns", 10, "number of concurrent connections")
	size := flag.Int("size", 1024, "message size in bytes")
	duration := flag.Float64("duration", 5, "measured duration in seconds")
	warmup := flag.Float64("warmup", 1, "warm-up duration in seconds (not measured)")
	timeout := flag.Float64("timeout", 5, "per-connection grace after the end before giving up on a reply, seconds")
	engine := flag.String("engine", "epoll", "client engine: epoll (one thread, raw epoll: cheapest per request) or net (a goroutine per connection)")
	rate := flag.Float64("rate", 0, "requests per second in all, paced per connection (epoll engine; 0: each connection sends its next message as soon as the echo is back)")
	useTLS := flag.Bool("tls", false, "speak TLS (implies -engine net; the server certificate is not verified: loopback benchmark)")
	flag.StringVar(&wsPath, "ws", "", "WebSocket: handshake on PATH, then each message is a binary message (implies -engine net)")
	flag.Parse()
	if wsPath != "" {
		*engine = "net"
	}
	if *useTLS {
		*engine = "net"
		tlsConfig = &tls.Config{InsecureSkipVerify: true}
	}

	if *rate < 0 || (*rate > 0 && *engine != "epoll") {
		fmt.Fprintln(os.Stderr, "echoclient: -rate must be >= 0, and needs -engine epoll")
		os.Exit(2)
	}
	if *conns < 1 || *size < 1 || *duration <= 0 || *warmup < 0 {
		fmt.Fprintln(os.Stderr, "echoclient: -conns, -size and -duration must be positive, -warmup >= 0")
		os.Exit(2)
	}
	network, target := "tcp", *addr
	if *unixPath != "" {
		network, target = "unix", *unixPath
	}

	if *engine == "epoll" {
		runEpoll(network, target, *conns, *size, *warmup, *duration, *timeout, *rate)
		return
	}
	if *engine != "net" {
		fmt.Fprintln(os.Stderr, "echoclient: -engine must be epoll or net")
		os.Exit(2)
	}

	var phase atomic.Int32
	start := time.Now()
	warmEnd := start.Add(secs(*warmup))
	end := warmEnd.Add(secs(*duration))
	deadline := end.Add(secs(*timeout))

	workers := make([]*worker, *conns)
	var wg sync.WaitGroup
	for i := range workers {
		w := &worker{lat: make([]time.Duration, 0, 1<<14)}
		workers[i] = w
		wg.Add(1)
		go func(id int) {
			defer wg.Done()
			w.run(id, network, target, *size, &phase, deadline)
		}(i)
	}

	time.Sleep(time.Until(warmEnd))
	phase.Store(phaseMeasure)
	t0 := time.Now()
	time.Sleep(time.Until(end))
	phase.Store(phaseStop)
	elapsed := time.Since(t0)
	wg.Wait()

	report(workers, *conns, *size, elapsed)
}

// report merges the workers' figures, prints the JSON line and exits non-zero
// when nothing was measured.
func report(workers []*worker, conns, size int, elapsed time.Duration) {
	var all []time.Duration
	res := result{Conns: conns, Size: size, Secs: round(elapsed.Seconds(), 3)}
	for _, w := range workers {
		all = append(all, w.lat...)
		res.Bytes += w.bytes
		res.Errors += w.errors
		if res.Error == "" && w.first != "" {
			res.Error = w.first
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	res.RPS = round(float64(len(all))/elapsed.Seconds(), 1)
	res.P50 = round(percentile(all, 0.50), 1)
	res.P99 = round(percentile(all, 0.99), 1)

	out, _ := json.Marshal(res)
	fmt.Println(string(out))
	if len(all) == 0 {
		os.Exit(1)
	}
}

// tlsConfig is set by -tls: connections then speak TLS.
var tlsConfig *tls.Config

// run drives one connection until the stop phase, reconnecting after errors.
func (w *worker) run(id int, network, target string, size int, phase *atomic.Int32, deadline time.Time) {
	msg := make([]byte, size)
	for i := range msg {
		msg[i] = byte('a' + (i+id)%26)
	}
	buf := make([]byte, size)
	var seq uint64

	for phase.Load() != phaseStop {
		conn, err := net.DialTimeout(network, target, 2*time.Second)
		if err != nil {
			w.fail(err)
			time.Sleep(20 * time.Millisecond)
			continue
		}
		if tc, ok := conn.(*net.TCPConn); ok {
			tc.SetNoDelay(true)
		}
		if tlsConfig != nil {
			tc := tls.Client(conn, tlsConfig)
			tc.SetDeadline(time.Now().Add(5 * time.Second))
			if err := tc.Handshake(); err != nil {
				w.fail(err)
				conn.Close()
				time.Sleep(20 * time.Millisecond)
				continue
			}
			conn = tc
		}
		conn.SetDeadline(deadline)
		var ws *wsConn
		if wsPath != "" {
			if ws, err = wsOpen(conn, target, size); err != nil {
				w.fail(err)
				conn.Close()
				time.Sleep(20 * time.Millisecond)
				continue
			}
		}
		for {
			p := phase.Load()
			if p == phaseStop {
				break
			}
			// Make every message distinct so that a server replaying an old
			// buffer or reordering data is caught.
			seq++
			if size >= 8 {
				binary.LittleEndian.PutUint64(msg, seq)
			} else {
				msg[0] = byte(seq)
			}
			t := time.Now()
			if ws != nil {
				err = ws.roundTrip(msg, buf)
			} else if _, err = conn.Write(msg); err == nil {
				_, err = io.ReadFull(conn, buf)
			}
			if err != nil {
				break
			}
			rtt := time.Since(t)
			if !bytes.Equal(buf, msg) {
				err = errors.New("echoed bytes differ from the message sent")
				break
			}
			if p == phaseMeasure && phase.Load() == phaseMeasure {
				w.lat = append(w.lat, rtt)
				w.bytes += int64(size)
			}
		}
		conn.Close()
		if err != nil {
			w.fail(err)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

func (w *worker) fail(err error) {
	w.errors++
	if w.first == "" {
		w.first = err.Error()
	}
}

func secs(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

func percentile(sorted []time.Duration, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q * float64(len(sorted)-1))
	return float64(sorted[i]) / float64(time.Microsecond)
}

func round(x float64, digits int) float64 {
	p := 1.0
	for i := 0; i < digits; i++ {
		p *= 10
	}
	return float64(int64(x*p+0.5)) / p
}
