// Command h3load is the HTTP/3 and HTTP/2 load generator of bench/h3_bench.py, on quic-go's
// HTTP/3 client and golang.org/x/net/http2's client (neither is goloop's).
//
// It opens -conns connections to -url (HTTP/3 with -proto h3, HTTP/2 over TLS with -proto
// h2), runs -streams requests at a time on each, each stream sending GETs one after the
// other; after -warmup requests per stream it times -n requests per stream and prints one
// JSON line: {"n":..., "errors":..., "seconds":..., "rps":..., "p50_us":..., "p99_us":...}.
package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go/http3"
	"golang.org/x/net/http2"
)

func main() {
	url := flag.String("url", "", "the URL to GET")
	proto := flag.String("proto", "h3", "h3 or h2")
	conns := flag.Int("conns", 2, "connections")
	streams := flag.Int("streams", 16, "requests at a time per connection")
	n := flag.Int("n", 500, "timed requests per stream")
	warmup := flag.Int("warmup", 50, "untimed requests per stream first")
	cafile := flag.String("cafile", "", "the CA that signed the server's certificate")
	flag.Parse()
	pool := x509.NewCertPool()
	if ca, err := os.ReadFile(*cafile); err == nil {
		pool.AppendCertsFromPEM(ca)
	}
	tlsConf := &tls.Config{RootCAs: pool, ServerName: "localhost"}
	var errs atomic.Int64
	lat := make([][]time.Duration, *conns**streams)
	var ready, start sync.WaitGroup
	var done sync.WaitGroup
	start.Add(1)
	for c := range *conns {
		var rt http.RoundTripper
		if *proto == "h3" {
			rt = &http3.Transport{TLSClientConfig: tlsConf.Clone()}
		} else {
			rt = &http2.Transport{TLSClientConfig: tlsConf.Clone()}
		}
		cl := &http.Client{Transport: rt, Timeout: 30 * time.Second}
		for s := range *streams {
			i := c**streams + s
			ready.Add(1)
			done.Add(1)
			go func() {
				defer done.Done()
				get := func() bool {
					resp, err := cl.Get(*url)
					if err != nil {
						errs.Add(1)
						return false
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						errs.Add(1)
						return false
					}
					return true
				}
				for range *warmup {
					get()
				}
				ready.Done()
				start.Wait()
				l := make([]time.Duration, 0, *n)
				for range *n {
					t := time.Now()
					if get() {
						l = append(l, time.Since(t))
					}
				}
				lat[i] = l
			}()
		}
	}
	ready.Wait()
	t0 := time.Now()
	start.Done()
	done.Wait()
	secs := time.Since(t0).Seconds()
	all := slices.Concat(lat...)
	slices.Sort(all)
	pct := func(q float64) float64 {
		if len(all) == 0 {
			return 0
		}
		return float64(all[min(len(all)-1, int(q*float64(len(all))))].Microseconds())
	}
	out, _ := json.Marshal(map[string]any{"n": len(all), "errors": errs.Load(), "seconds": secs,
		"rps": float64(len(all)) / secs, "p50_us": pct(0.50), "p99_us": pct(0.99)})
	fmt.Println(string(out))
}
