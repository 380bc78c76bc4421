// The ceiling of bench/serve_bench.py's table: the fastest Go HTTP/1.1 server there is
// (fasthttp), one thread (GOMAXPROCS=1), answering the rows without Python what
// bench/servers/serve_apps.py's hello and big apps answer: 13 bytes of text/plain, or 100 KiB.
// fasthttp is already a test-only dependency (the parser's side-by-side benchmark); it is
// never linked into goloop's extension. serve_bench.py builds this when Go is installed.
package main

import (
	"bytes"
	"flag"
	"log"
	"runtime"

	"github.com/valyala/fasthttp"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8099", "listen address")
	app := flag.String("app", "hello", "hello (13 bytes) or big (100 KiB)")
	cert := flag.String("cert", "", "TLS certificate (PEM); with -key, serve HTTPS")
	key := flag.String("key", "", "TLS key (PEM)")
	flag.Parse()
	runtime.GOMAXPROCS(1)
	body := []byte("Hello, world!")
	if *app == "big" {
		body = bytes.Repeat([]byte("x"), 100*1024)
	}
	h := func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("text/plain")
		ctx.SetBody(body)
	}
	if *cert != "" {
		log.Fatal(fasthttp.ListenAndServeTLS(*addr, *cert, *key, h))
	}
	log.Fatal(fasthttp.ListenAndServe(*addr, h))
}
