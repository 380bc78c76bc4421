package httpserver

// wsdeflate.go: permessage-deflate (RFC 7692): the negotiation of its parameters, inflating
// received messages (bounded by the maximum message size, with early UTF-8 checks of
// fragmented compressed text) and compressing sent ones within the negotiated window.

import (
	"bytes"
	"compress/flate"
	"errors"
	"io"
	"strconv"
	"strings"
	"sync"
)

// deflateParams is what a permessage-deflate negotiation settled.
type deflateParams struct {
	resp string // the response's extension line
	// serverBits: the window our compressor may use (server_max_window_bits, 8-15)
	serverBits int
	// clientWindow: how much of the client's output its next message may refer to (its
	// LZ77 window: 32 KiB, 1<<client_max_window_bits, or 0 for client_no_context_takeover)
	clientWindow int
}

// windowBits parses a window-bits value (RFC 7692 7.1.2: 1*DIGIT without a leading zero,
// 8 to 15, possibly quoted).
func windowBits(v string) (int, bool) {
	v = strings.Trim(v, `"`)
	if len(v) == 0 || len(v) > 2 || v[0] == '0' {
		return 0, false
	}
	n := 0
	for _, c := range []byte(v) {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = 10*n + int(c-'0')
	}
	return n, n >= 8 && n <= 15
}

// negotiateDeflate takes the first permessage-deflate offer that is valid (RFC 7692
// 7.1: known parameters, each once, values in range) and returns its parameters (ok false:
// none). All of them can be honoured:
//   - server_no_context_takeover is always answered: a message is compressed on its own
//     (a pooled compressor; no per-connection compressor memory), which a server may
//     always say (7.1.1.1).
//   - server_max_window_bits=N (8-15) is answered with the same N: a message of up to 2^N
//     bytes cannot refer farther back than itself; a longer one is compressed in
//     independent pieces of 2^N bytes (N >= wsChunkMinBits) or with Huffman codes only,
//     no back-references at all (smaller N): deflateMessage.
//   - client_max_window_bits[=N] only bounds the client's compressor, and the inflater
//     reads any window up to 15 bits: with a value it is answered with that value (the
//     client's context we keep is then 2^N bytes), without one it is not answered (the
//     client uses 15 bits; 7.1.2.2 forbids a value the offer did not ask for).
//   - client_no_context_takeover is echoed (7.1.1.2 allows it): no client context is kept.
func negotiateDeflate(header string) (deflateParams, bool) {
	for _, offer := range strings.Split(header, ",") {
		parts := strings.Split(offer, ";")
		if strings.TrimSpace(parts[0]) != "permessage-deflate" {
			continue
		}
		ok := true
		seen := map[string]bool{}
		p := deflateParams{serverBits: 15, clientWindow: 1 << 15}
		clientBits := 0
		clientNoCtx := false
		for _, part := range parts[1:] {
			name, value, hasValue := strings.Cut(strings.TrimSpace(part), "=")
			name = strings.TrimSpace(name)
			value = strings.TrimSpace(value)
			if seen[name] {
				ok = false
				break
			}
			seen[name] = true
			switch name {
			case "server_no_context_takeover":
				ok = ok && !hasValue
			case "client_no_context_takeover":
				ok = ok && !hasValue
				clientNoCtx = true
			case "server_max_window_bits":
				n, valid := windowBits(value)
				ok = ok && hasValue && valid
				p.serverBits = n
			case "client_max_window_bits":
				if hasValue {
					n, valid := windowBits(value)
					ok = ok && valid
					clientBits = n
				}
			default:
				ok = false
			}
		}
		if !ok {
			continue
		}
		p.resp = "permessage-deflate; server_no_context_takeover"
		if seen["server_max_window_bits"] {
			p.resp += "; server_max_window_bits=" + strconv.Itoa(p.serverBits)
		}
		if clientNoCtx {
			p.resp += "; client_no_context_takeover"
			p.clientWindow = 0
		} else if clientBits != 0 {
			p.resp += "; client_max_window_bits=" + strconv.Itoa(clientBits)
			p.clientWindow = 1 << clientBits
		}
		return p, true
	}
	return deflateParams{}, false
}

// the end of a message's deflate stream (RFC 7692 7.2.2), then an empty final block so the
// reader ends with io.EOF
const deflateTail = "\x00\x00\xff\xff\x01\x00\x00\xff\xff"

var (
	flateReaders sync.Pool
	flateWriters sync.Pool
)

// A compressed text message's UTF-8 fails fast too: at each of its first zProbeMax
// non-final frames the compressed bytes so far are inflated again from the message's start
// (compress/flate cannot resume: a reader out of input ends with io.ErrUnexpectedEOF for
// good, having output what it decoded), up to zProbeOut bytes, and the text not checked yet
// is fed to w.utf8. The work is bounded (zProbeMax inflations of at most zProbeOut bytes a
// message) and only fragmented compressed text pays it; past the bounds the message is
// checked once inflated whole.
const (
	zProbeMax = 16
	zProbeOut = 1 << 20
)

// zProbe checks the text of the compressed message so far (w.frag); false: invalid UTF-8
// or corrupt data (the whole message would fail alike).
func (w *WS) zProbe(maxSize int) bool {
	if w.zProbes >= zProbeMax || w.zDone >= min(zProbeOut, maxSize) {
		return true
	}
	w.zProbes++
	fr := w.flateReader(bytes.NewReader(w.frag))
	var out bytes.Buffer
	_, err := io.Copy(&out, io.LimitReader(fr, int64(min(zProbeOut, maxSize))))
	flateReaders.Put(fr)
	var corrupt flate.CorruptInputError
	if errors.As(err, &corrupt) {
		return false
	}
	if data := out.Bytes(); len(data) > w.zDone {
		ok := w.utf8.feed(data[w.zDone:], false)
		w.zDone = len(data)
		return ok
	}
	return true
}

// flateReader: an inflater (from the pool) of src with the client's window.
func (w *WS) flateReader(src io.Reader) io.ReadCloser {
	if x := flateReaders.Get(); x != nil {
		fr := x.(io.ReadCloser)
		fr.(flate.Resetter).Reset(src, w.dict)
		return fr
	}
	return flate.NewReaderDict(src, w.dict)
}

// inflateChunk is the size of the pieces a message inflates into past its first.
const inflateChunk = 64 << 10

// inflate decompresses a message with the client's window; code 1009 (too big) or 1007.
// It inflates into pieces (the first sized for a message that compresses 4:1, then
// inflateChunk each), joined at the end: a message over maxSize (a decompression bomb)
// costs maxSize and one piece, never a buffer doubled past it.
func (w *WS) inflate(p []byte, maxSize int) ([]byte, int) {
	fr := w.flateReader(io.MultiReader(bytes.NewReader(p), strings.NewReader(deflateTail)))
	piece := make([]byte, 0, min(len(p)*4+64, maxSize+1))
	var pieces [][]byte
	total := 0
	var err error
	for total <= maxSize {
		if len(piece) == cap(piece) {
			pieces = append(pieces, piece)
			piece = make([]byte, 0, min(inflateChunk, maxSize+1-total))
		}
		var n int
		n, err = fr.Read(piece[len(piece):cap(piece)])
		piece = piece[:len(piece)+n]
		total += n
		if err != nil {
			break
		}
	}
	flateReaders.Put(fr)
	if total > maxSize {
		return nil, 1009
	}
	if err != io.EOF {
		return nil, 1007
	}
	data := piece
	if len(pieces) > 0 {
		data = make([]byte, 0, total)
		for _, b := range pieces {
			data = append(data, b...)
		}
		data = append(data, piece...)
	}
	// the window the client's next message may refer to (none: client_no_context_takeover)
	window := w.zp.clientWindow
	switch {
	case window == 0:
	case len(data) >= window:
		w.dict = append(w.dict[:0], data[len(data)-window:]...)
	default:
		keep := min(len(w.dict), window-len(data))
		nd := make([]byte, 0, window)
		nd = append(nd, w.dict[len(w.dict)-keep:]...)
		w.dict = append(nd, data...)
	}
	return data, 0
}

type sliceWriter struct{ b []byte }

func (s *sliceWriter) Write(p []byte) (int, error) { s.b = append(s.b, p...); return len(p), nil }

// wsChunkMinBits: below this server_max_window_bits a message longer than the window is
// compressed with Huffman codes only; from it on, in independent pieces of the window's
// size. On a 29 KB JSON message (BenchmarkWSDeflateWindow): 15 bits 0.18 of its size,
// pieces of 2^12 0.23 (2x the CPU time), 2^10 0.35 (4x), 2^9 0.46 (~9x), Huffman only 0.60
// (0.7x).
const wsChunkMinBits = 10

var huffWriters sync.Pool

// deflateMessage compresses one message on its own (no context takeover) for a peer whose
// window is 2^bits bytes. Go's flate refers up to 32 KiB back; with a smaller window the
// output must never refer farther back than 2^bits bytes (RFC 7692 7.1.2.1): a message
// that fits the window cannot; a longer one is cut into pieces of 2^bits bytes, each
// compressed by a reset compressor (which forgets what came before) and ended with a sync
// flush, so a piece refers only to itself; for a window under 2^wsChunkMinBits the pieces
// would cost more than they save, and the message is compressed with Huffman codes only
// (flate.HuffmanOnly: no back-references, valid under any window).
func deflateMessage(p []byte, bits int) []byte {
	sw := &sliceWriter{b: make([]byte, 0, len(p)/2+64)}
	piece := len(p)
	pool, level := &flateWriters, flate.BestSpeed
	if bits < 15 && len(p) > 1<<bits {
		if bits >= wsChunkMinBits {
			piece = 1 << bits
		} else {
			pool, level = &huffWriters, flate.HuffmanOnly
		}
	}
	var fw *flate.Writer
	if x := pool.Get(); x != nil {
		fw = x.(*flate.Writer)
	} else {
		fw, _ = flate.NewWriter(io.Discard, level)
	}
	for len(p) > 0 {
		n := min(piece, len(p))
		fw.Reset(sw)
		fw.Write(p[:n])
		fw.Flush()
		p = p[n:]
	}
	fw.Reset(io.Discard)
	pool.Put(fw)
	return bytes.TrimSuffix(sw.b, []byte{0, 0, 0xff, 0xff})
}
