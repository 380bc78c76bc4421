package tests_go

import (
	"math/rand/v2"
	"testing"

	"github.com/goloop/goloop/goloop/httpparser"
)

var httpFuzzSeeds = []string{
	"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
	"\r\nGET /a?b#c HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET / HTTP/1.0\r\n\r\n",
	"POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\nhelloGET / HTTP/1.1\r\n\r\n",
	"POST /c HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n5;a=\"b\"\r\nhello\r\n0\r\nT: v\r\n\r\n",
	"GET /ws HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n\x81\x00",
	"CONNECT h:443 HTTP/1.1\r\n\r\nxx",
	"GET / HTTP/1.1\r\nX: a\r\n b\r\nHost : c\r\n\r\n",
	"GET / HTTP/1.1\rHost: a\r\r",
	"GET / HTTP/1.1\nHost: a\n\n",
	"POST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n1 \r\nx0\r\n\r\n",
	"GET / HTTP/1.1\r\nConnection: close\r\n\r\nGET / HTTP/1.1\r\n\r\n",
}

var httpFuzzRespSeeds = []string{
	"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi",
	"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\nHTTP/1.1 200 OK\r\n\r\nbody",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\nT: v\r\n\r\n",
	"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\nraw",
	"HTTP/1.0 200\r\nTransfer-Encoding: gzip\r\n\r\nzz",
	"HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\n",
}

func fuzzOpts(resp bool, lenient uint16, maxHdr uint8, eof bool) httpOpts {
	o := httpOpts{resp: resp, lenient: httpparser.Lenient(lenient) & httpparser.LenientAll, eof: eof}
	if maxHdr != 0 {
		o.maxHdr = int(maxHdr) // small limits exercise the overflow checks
	}
	// the high bits (no leniency uses them) pick what goloop.http sets
	o.upSkips = lenient&0x8000 != 0
	o.noLimit = lenient&0x4000 != 0 && maxHdr == 0
	return o
}

func checkSplitInvariance(t *testing.T, o httpOpts, data []byte, parts [][]byte) {
	whole := runHTTP(o, data)
	got := runHTTP(o, parts...)
	if !equalResults(whole, got) {
		t.Fatalf("split into %d parts differs:\nwhole: %+v\nsplit: %+v", len(parts), whole, got)
	}
}

func byteSplit(data []byte) [][]byte {
	parts := make([][]byte, len(data))
	for i := range data {
		parts[i] = data[i : i+1]
	}
	return parts
}

func FuzzRequest(f *testing.F) {
	for _, s := range httpFuzzSeeds {
		f.Add([]byte(s), uint16(0), uint8(0), false)
		f.Add([]byte(s), uint16(httpparser.LenientAll), uint8(40), true)
		f.Add([]byte(s), uint16(0xc000), uint8(0), false)
		// goloop serve's leniency: the head's fast paths, against the bytes one at a time
		f.Add([]byte(s), uint16(httpparser.LenientDataAfterClose|0x8000), uint8(0), false)
	}
	f.Fuzz(func(t *testing.T, data []byte, lenient uint16, maxHdr uint8, eof bool) {
		o := fuzzOpts(false, lenient, maxHdr, eof)
		checkSplitInvariance(t, o, data, byteSplit(data))
	})
}

func FuzzResponse(f *testing.F) {
	for _, s := range httpFuzzRespSeeds {
		f.Add([]byte(s), uint16(0), uint8(0), true, false)
		f.Add([]byte(s), uint16(httpparser.LenientAll), uint8(50), false, true)
		f.Add([]byte(s), uint16(0xc000), uint8(0), true, false)
	}
	f.Fuzz(func(t *testing.T, data []byte, lenient uint16, maxHdr uint8, eof, skipBody bool) {
		o := fuzzOpts(true, lenient, maxHdr, eof)
		o.skipBody = skipBody
		checkSplitInvariance(t, o, data, byteSplit(data))
	})
}

func FuzzSplit(f *testing.F) {
	for i, s := range append(append([]string{}, httpFuzzSeeds...), httpFuzzRespSeeds...) {
		f.Add([]byte(s), uint64(i), i >= len(httpFuzzSeeds), uint16(0))
		f.Add([]byte(s), uint64(i*31+7), i >= len(httpFuzzSeeds), uint16(httpparser.LenientAll))
		f.Add([]byte(s), uint64(i*17+3), i >= len(httpFuzzSeeds), uint16(0x8000))
	}
	f.Fuzz(func(t *testing.T, data []byte, seed uint64, resp bool, lenient uint16) {
		o := fuzzOpts(resp, lenient, 0, true)
		rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
		for k := 0; k < 4; k++ {
			var parts [][]byte
			for rest := data; len(rest) > 0; {
				n := 1 + rng.IntN(len(rest))
				if rng.IntN(2) == 0 {
					n = 1 + rng.IntN(min(len(rest), 8))
				}
				parts = append(parts, rest[:n])
				rest = rest[n:]
			}
			// empty Feed calls must change nothing either
			parts = append(parts, nil)
			checkSplitInvariance(t, o, data, parts)
		}
	})
}

func FuzzParseURL(f *testing.F) {
	for _, s := range []string{"/", "*", "/a/b?c=d#e", "http://u:p@h:80/p?q#f", "https://[::1]:443/", "http://h:65536/", "x://", "/\xff"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		u, err := httpparser.ParseURL(data)
		if err != nil {
			return
		}
		if u.Port < -1 || u.Port > 65535 {
			t.Fatalf("port %d", u.Port)
		}
		if u.Schema != nil && u.Host == nil {
			t.Fatalf("schema without host")
		}
		if u.Schema == nil && (u.Host != nil || u.Port != -1 || u.Userinfo != nil) {
			t.Fatalf("authority without schema")
		}
		total := len(u.Schema) + len(u.Host) + len(u.Path) + len(u.Query) + len(u.Fragment) + len(u.Userinfo)
		if total > len(data) {
			t.Fatalf("parts longer than input")
		}
		// the same input parses the same way again
		v, err := httpparser.ParseURL(append([]byte(nil), data...))
		if err != nil || string(v.Path) != string(u.Path) || string(v.Host) != string(u.Host) || v.Port != u.Port {
			t.Fatalf("not deterministic")
		}
	})
}
