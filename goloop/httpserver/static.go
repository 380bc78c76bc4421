package httpserver

// static.go: static files served by the engine itself, before the application is called
// (`goloop serve --static-path-route/--static-path-mount`, Granian's names). A request
// whose path is under a mounted route never reaches Python: the reader that parsed it
// answers it through the request's own Exchange (so HTTP/1.1, HTTP/2 and TLS frame it as
// they frame an application's response: sendfile(2) from the loop driver or the writer
// goroutine on plain HTTP/1.1, reads and writes over TLS, DATA frames under flow control
// on HTTP/2), then finishes it as an application's return would. It is counted by the
// metrics like any request, and, with the access log on, recorded for the binding to
// log (TakeStaticLog).
//
// Nothing outside a mounted directory is reachable: files are opened with openat2(2)
// RESOLVE_BENEATH from the directory (or, on kernels without it, through an os.Root: the
// same rule, symbolic links followed only while they stay in it, absolute ones never), and
// a path with a NUL byte, a backslash, a "." or ".." segment (also percent-encoded), or an
// encoded '/' or '\' is refused (400) before any file is opened.

import (
	"bytes"
	"errors"
	"mime"
	"net/http"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// StaticMount is a directory served under a URL route.
type StaticMount struct {
	Route string // the URL path prefix ("/static"; "/" serves every path)
	Dir   string // the directory
	Index string // a directory's index file name ("": a directory is 404)
	// MaxAge: Cache-Control: public, max-age=MaxAge (seconds); 0 or less: no Cache-Control.
	MaxAge int
}

type staticMount struct {
	route string // without a trailing '/' ("" for "/")
	root  *os.Root
	dirfd int // the directory, O_PATH, for openat2 (-1: os.Root only)
	index string
	cc    string // the cache-control line, or ""
}

type staticServer struct {
	mounts []staticMount
	logOn  bool

	mu      sync.Mutex
	log     []StaticLogEntry
	dropped int64
}

// StaticLogEntry is what the access log says of a static response.
type StaticLogEntry struct {
	Client   string // "host:port", or the Unix socket's path, or the proxy's client
	Method   string
	Path     string // the raw path, with "?query" if any
	Proto    string // "1.1", "2"
	Status   int
	Size     int64 // body bytes sent (0 for HEAD and 304)
	Duration int64 // nanoseconds from the head's arrival (metrics on; else from the lookup) to the response queued
	Agent    string
	Referer  string
}

// staticLogMax bounds the records waiting for TakeStaticLog; beyond it they are dropped
// (and counted): a client cannot make the server hold unbounded memory for the log.
const staticLogMax = 16384

// SetStatic serves mounts from Go (before ListenFd); log: keep a record of each static
// response for TakeStaticLog. A mount's directory is opened now (an error names it).
func (s *Server) SetStatic(mounts []StaticMount, log bool) error {
	st := &staticServer{logOn: log}
	for _, m := range mounts {
		route := strings.TrimRight(m.Route, "/")
		if !strings.HasPrefix(m.Route, "/") {
			return errors.New("static route must begin with '/': " + strconv.Quote(m.Route))
		}
		if strings.ContainsAny(m.Index, "/\\\x00") || m.Index == "." || m.Index == ".." {
			return errors.New("static index file must be a plain file name: " + strconv.Quote(m.Index))
		}
		root, err := os.OpenRoot(m.Dir)
		if err != nil {
			st.close()
			return err
		}
		sm := staticMount{route: route, root: root, index: m.Index, dirfd: -1}
		if fd, err := unix.Open(m.Dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err == nil {
			sm.dirfd = fd
		}
		if m.MaxAge > 0 {
			sm.cc = "cache-control: public, max-age=" + strconv.Itoa(m.MaxAge) + "\r\n"
		}
		st.mounts = append(st.mounts, sm)
	}
	if len(st.mounts) == 0 {
		st = nil
	}
	if old := s.static; old != nil {
		old.close()
	}
	s.static = st
	return nil
}

func (st *staticServer) close() {
	for _, m := range st.mounts {
		m.root.Close()
		if m.dirfd >= 0 {
			unix.Close(m.dirfd)
		}
	}
}

// TakeStaticLog returns the static responses' records since the last call, and how many
// were dropped because too many waited.
func (s *Server) TakeStaticLog() ([]StaticLogEntry, int64) {
	st := s.static
	if st == nil {
		return nil, 0
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	l, d := st.log, st.dropped
	st.log, st.dropped = nil, 0
	return l, d
}

// match is the mount serving path (decoded), and the rest of the path after its route.
func (st *staticServer) match(p []byte) (*staticMount, []byte) {
	for i := range st.mounts {
		m := &st.mounts[i]
		if len(p) >= len(m.route) && string(p[:len(m.route)]) == m.route &&
			(len(p) == len(m.route) || p[len(m.route)] == '/') {
			return m, p[len(m.route):]
		}
	}
	return nil, nil
}

// route is r's static mount and the path under it, or nil: the application's (a WebSocket
// handshake always is).
func (st *staticServer) route(r *Request) (*staticMount, []byte) {
	if r.ws != nil {
		return nil, nil
	}
	return st.match(r.Path())
}

// staticBatch answers the requests of the last read that are under a static route and
// takes them out of the batch (pushBatch; c.mu not held).
func (c *Conn) staticBatch() {
	st := c.s.static
	j, served := 0, false
	for _, ev := range c.batch {
		if ev.Kind == EvRequest {
			if m, rest := st.route(ev.Req); m != nil {
				st.serve(m, ev.Req, rest)
				served = true
				continue
			}
		}
		c.batch[j] = ev
		j++
	}
	if !served {
		return
	}
	clear(c.batch[j:])
	c.batch = c.batch[:j]
	c.flush()
}

// staticInline: files (or ranges) up to this size are read into the response instead of
// being sent from the file (sendfile(2), or reads as the output drains).
const staticInline = 16 * 1024

// errStaticPath: a path that must not be mapped to a file (400).
var errStaticPath = errors.New("bad static path")

// staticName is the file name under the mount of rest (the decoded path after the
// route; raw: the path as it came, for its encoded separators), or errStaticPath; "." for
// the mount's directory itself.
func staticName(raw, rest []byte) (name string, err error) {
	if bytes.IndexByte(rest, 0) >= 0 || bytes.IndexByte(rest, '\\') >= 0 {
		return "", errStaticPath
	}
	// an encoded '/' or '\' would make one segment two once decoded
	for i := 0; i+2 < len(raw); i++ {
		if raw[i] == '%' && raw[i+1] == '2' && (raw[i+2] == 'f' || raw[i+2] == 'F') ||
			raw[i] == '%' && raw[i+1] == '5' && (raw[i+2] == 'c' || raw[i+2] == 'C') {
			return "", errStaticPath
		}
	}
	var b strings.Builder
	for _, seg := range bytes.Split(rest, []byte{'/'}) {
		if len(seg) == 0 {
			continue
		}
		if string(seg) == "." || string(seg) == ".." {
			return "", errStaticPath
		}
		if b.Len() > 0 {
			b.WriteByte('/')
		}
		b.Write(seg)
	}
	if b.Len() == 0 {
		return ".", nil
	}
	return b.String(), nil
}

// staticReply is a response being made.
type staticReply struct {
	status int
	hdr    []byte
	f      *os.File
	off, n int64
	body   []byte // a short text body (errors)
}

func (rp *staticReply) line(name, value string) {
	rp.hdr = append(rp.hdr, name...)
	rp.hdr = append(rp.hdr, ": "...)
	rp.hdr = append(rp.hdr, value...)
	rp.hdr = append(rp.hdr, "\r\n"...)
}

func (rp *staticReply) text(status int, msg string) {
	rp.status = status
	rp.line("content-type", "text/plain; charset=utf-8")
	rp.body = []byte(msg)
}

// serve answers r from mount m (rest: the decoded path after the route), then finishes
// it as the application's return would.
func (st *staticServer) serve(m *staticMount, r *Request, rest []byte) {
	t0 := r.t0
	if t0 == 0 && st.logOn {
		t0 = monoNow()
	}
	var rp staticReply
	st.reply(m, r, rest, &rp)
	if rp.f != nil && (rp.n == 0 || r.head) {
		rp.f.Close()
		rp.f = nil
	}
	if rp.f != nil && rp.n <= staticInline {
		// a small file is read now and leaves with its head in one write (no sendfile(2)
		// after a writev, no file segment held in the output queue)
		b := make([]byte, rp.n)
		if n, err := rp.f.ReadAt(b, rp.off); err == nil && int64(n) == rp.n {
			rp.f.Close()
			rp.f, rp.body = nil, b
		}
	}
	size := int64(len(rp.body))
	if rp.f != nil {
		size = rp.n
	}
	if r.head || rp.status == 304 {
		size = 0
	}
	var err error
	if err = r.Start(rp.status, rp.hdr); err == nil {
		if rp.f != nil {
			_, _, err = r.x.send(bodyPart{f: rp.f, off: rp.off, n: rp.n}, false, ErrNotStarted)
			rp.f = nil
		} else {
			_, _, err = r.x.send(bodyPart{b: rp.body}, false, ErrNotStarted)
		}
	}
	if rp.f != nil {
		rp.f.Close()
	}
	if st.logOn && err == nil {
		st.record(r, rp.status, size, t0)
	}
	r.Finish(false)
}

// record keeps the access log's record of r's response.
func (st *staticServer) record(r *Request, status int, size, t0 int64) {
	e := StaticLogEntry{Method: string(r.Method()), Path: string(r.RawPath()), Status: status, Size: size}
	if q := r.Query(); len(q) > 0 {
		e.Path += "?" + string(q)
	}
	e.Duration = monoNow() - t0
	e.Proto = "1.1"
	if _, ok := r.x.(*h2Stream); ok {
		e.Proto = "2"
	} else if r.Major == 3 {
		e.Proto = "3"
	} else if r.Major == 1 && r.Minor == 0 {
		e.Proto = "1.0"
	}
	a := r.c.Remote
	switch {
	case r.Proxy != nil && r.Proxy.Client != "":
		e.Client = r.Proxy.Client
	case a.Unix:
		e.Client = a.Host
	case a.Host != "":
		e.Client = a.Host + ":" + strconv.Itoa(a.Port)
	}
	for i, n := 0, r.NumHeaders(); i < n; i++ {
		name, value := r.Header(i)
		switch string(name) {
		case "user-agent":
			e.Agent = string(value)
		case "referer":
			e.Referer = string(value)
		}
	}
	st.mu.Lock()
	if len(st.log) < staticLogMax {
		st.log = append(st.log, e)
	} else {
		st.dropped++
	}
	st.mu.Unlock()
}

// reply decides r's response (rp): a file (rp.f, its range), or an error's text.
func (st *staticServer) reply(m *staticMount, r *Request, rest []byte, rp *staticReply) {
	method := r.Method()
	if string(method) != "GET" && string(method) != "HEAD" {
		rp.line("allow", "GET, HEAD")
		rp.text(405, "Method Not Allowed")
		return
	}
	name, err := staticName(r.RawPath(), rest)
	if err != nil {
		rp.text(400, "Bad Request")
		return
	}
	f, fi, name := m.open(name)
	if f == nil {
		rp.text(404, "Not Found")
		return
	}
	hdr := staticHeaders(r)
	ctype := contentType(name)
	var enc string
	if hdr.acceptEnc != nil {
		// a precompressed sibling (name.br, name.gz) the client accepts; Vary when one
		// exists, chosen or not (the response depends on Accept-Encoding then)
		vary := false
		for _, c := range [...]struct{ token, ext string }{{"br", ".br"}, {"gzip", ".gz"}} {
			if enc != "" || !acceptsEncoding(hdr.acceptEnc, c.token) {
				if !vary {
					if cf, _, err := m.openStat(name + c.ext); err == nil {
						cf.Close()
						vary = true
					}
				}
				continue
			}
			if cf, cfi, err := m.openStat(name + c.ext); err == nil {
				if cfi.regular {
					f.Close()
					f, fi, enc, vary = cf, cfi, c.token, true
					continue
				}
				cf.Close()
			}
		}
		if vary {
			rp.line("vary", "Accept-Encoding")
		}
	}
	size := fi.size
	mtime := fi.mtime.UTC().Truncate(time.Second)
	etag := `"` + strconv.FormatInt(size, 16) + "-" + strconv.FormatInt(fi.mtime.UnixNano(), 16)
	if enc != "" {
		etag += "-" + enc
	}
	etag += `"`
	lastMod := mtime.Format(http.TimeFormat)
	rp.line("etag", etag)
	rp.line("last-modified", lastMod)
	if m.cc != "" {
		rp.hdr = append(rp.hdr, m.cc...)
	}
	if notModified(hdr, etag, mtime) {
		f.Close()
		rp.status = 304
		return
	}
	rp.line("content-type", ctype)
	if enc != "" {
		rp.line("content-encoding", enc)
	}
	rp.line("accept-ranges", "bytes")
	rp.status, rp.f, rp.off, rp.n = 200, f, 0, size
	if hdr.rng == nil || r.head || !ifRange(hdr.ifRange, etag, lastMod) {
		rp.line("content-length", strconv.FormatInt(size, 10))
		return
	}
	start, n, ok := parseRange(hdr.rng, size)
	switch {
	case !ok: // not one byte range we read (malformed, several ranges): the whole file
		rp.line("content-length", strconv.FormatInt(size, 10))
	case n < 0: // unsatisfiable
		f.Close()
		rp.f = nil
		rp.line("content-range", "bytes */"+strconv.FormatInt(size, 10))
		rp.status, rp.body = 416, nil // (the file's content-type stays: RFC 9110 15.5.17)
	default:
		rp.status, rp.off, rp.n = 206, start, n
		rp.line("content-range", "bytes "+strconv.FormatInt(start, 10)+"-"+
			strconv.FormatInt(start+n-1, 10)+"/"+strconv.FormatInt(size, 10))
		rp.line("content-length", strconv.FormatInt(n, 10))
	}
}

// open opens name under the mount: a regular file, or a directory's index file (nil if
// neither, or if the path leaves the root). It returns the name of what it opened.
func (m *staticMount) open(name string) (*os.File, fileStat, string) {
	f, fi, err := m.openStat(name)
	if err != nil {
		return nil, fi, ""
	}
	if fi.dir && m.index != "" {
		f.Close()
		name = path.Join(name, m.index)
		if f, fi, err = m.openStat(name); err != nil {
			return nil, fi, ""
		}
	}
	if !fi.regular {
		f.Close()
		return nil, fi, ""
	}
	return f, fi, name
}

// fileStat is what a response needs of a file's status.
type fileStat struct {
	size         int64
	mtime        time.Time
	dir, regular bool
}

// noOpenat2 is set when the kernel has no openat2(2) (before 5.6): os.Root opens then.
var noOpenat2 atomic.Bool

// openStat opens name beneath the mount's directory and reads its status. openat2(2) with
// RESOLVE_BENEATH (no "..", absolute path or symbolic link leading out; no /proc magic
// links) makes the descriptor itself: one system call, and a file Go's poller never sees
// (os.Root's files are offered to epoll, which refuses regular files, and Fd() switches
// them to blocking mode: five more system calls per request). Without openat2, os.Root.
func (m *staticMount) openStat(name string) (*os.File, fileStat, error) {
	if m.dirfd >= 0 && !noOpenat2.Load() {
		fd, err := unix.Openat2(m.dirfd, name, &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NOCTTY,
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS})
		for err == unix.EINTR || err == unix.EAGAIN {
			fd, err = unix.Openat2(m.dirfd, name, &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NOCTTY,
				Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS})
		}
		switch err {
		case nil:
			var st unix.Stat_t
			if err := unix.Fstat(fd, &st); err != nil {
				unix.Close(fd)
				return nil, fileStat{}, err
			}
			fi := fileStat{size: st.Size, mtime: time.Unix(st.Mtim.Unix()),
				dir: st.Mode&unix.S_IFMT == unix.S_IFDIR, regular: st.Mode&unix.S_IFMT == unix.S_IFREG}
			return os.NewFile(uintptr(fd), name), fi, nil
		case unix.ENOSYS, unix.EPERM: // no openat2 (EPERM: a seccomp filter that refuses it)
			noOpenat2.Store(true)
		default:
			return nil, fileStat{}, err
		}
	}
	f, err := m.root.Open(name)
	if err != nil {
		return nil, fileStat{}, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fileStat{}, err
	}
	return f, fileStat{size: st.Size(), mtime: st.ModTime(), dir: st.IsDir(), regular: st.Mode().IsRegular()}, nil
}

// reqHeaders is what a static response reads of the request's headers.
type reqHeaders struct {
	acceptEnc, ifNoneMatch, ifModSince, rng, ifRange []byte
	hasINM                                           bool
}

func staticHeaders(r *Request) (h reqHeaders) {
	for i, n := 0, r.NumHeaders(); i < n; i++ {
		name, value := r.Header(i)
		switch string(name) {
		case "accept-encoding":
			h.acceptEnc = append(append(h.acceptEnc, value...), ',')
		case "if-none-match":
			h.ifNoneMatch = append(append(h.ifNoneMatch, value...), ',')
			h.hasINM = true
		case "if-modified-since":
			h.ifModSince = value
		case "range":
			h.rng = value
		case "if-range":
			h.ifRange = value
		}
	}
	return h
}

// acceptsEncoding: the Accept-Encoding list ae names token (or "*") without q=0.
func acceptsEncoding(ae []byte, token string) bool {
	star := false
	for _, item := range bytes.Split(ae, []byte{','}) {
		coding, params, _ := bytes.Cut(item, []byte{';'})
		coding = bytes.TrimSpace(coding)
		q := true
		if p := bytes.TrimSpace(params); len(p) > 0 {
			if k, v, ok := bytes.Cut(p, []byte{'='}); ok && string(bytes.ToLower(bytes.TrimSpace(k))) == "q" {
				if f, err := strconv.ParseFloat(string(bytes.TrimSpace(v)), 64); err == nil && f <= 0 {
					q = false
				}
			}
		}
		switch {
		case equalFoldStr(coding, token):
			return q
		case string(coding) == "*":
			star = q
		}
	}
	return star
}

func equalFoldStr(b []byte, lower string) bool { return len(b) == len(lower) && equalFold(b, lower) }

// notModified: the conditional request's answer is 304 (RFC 9110 13.1.2, 13.1.3: If-None-Match
// with a weak comparison; If-Modified-Since only without If-None-Match).
func notModified(h reqHeaders, etag string, mtime time.Time) bool {
	if h.hasINM {
		for _, t := range bytes.Split(h.ifNoneMatch, []byte{','}) {
			t = bytes.TrimSpace(t)
			if string(t) == "*" || string(bytes.TrimPrefix(t, []byte("W/"))) == etag {
				return true
			}
		}
		return false
	}
	if h.ifModSince != nil {
		if t, err := http.ParseTime(string(h.ifModSince)); err == nil && !mtime.After(t) {
			return true
		}
	}
	return false
}

// ifRange: the Range header applies (no If-Range, or it names the current representation:
// its strong entity tag or its exact Last-Modified date).
func ifRange(v []byte, etag, lastMod string) bool {
	if v == nil {
		return true
	}
	v = bytes.TrimSpace(v)
	if len(v) > 0 && (v[0] == '"' || bytes.HasPrefix(v, []byte("W/"))) {
		return string(v) == etag
	}
	return string(v) == lastMod
}

// parseRange reads a Range header of one byte range against a file of size bytes: the
// range's start and length (n < 0: unsatisfiable, 416), ok false when the header is not a
// single byte range goloop reads (malformed, another unit, several ranges: answered with
// the whole file, 200, as RFC 9110 14.2 allows).
func parseRange(v []byte, size int64) (start, n int64, ok bool) {
	v = bytes.TrimSpace(v)
	if len(v) < 6 || !equalFold(v[:6], "bytes=") {
		return 0, 0, false
	}
	spec := bytes.TrimSpace(v[6:])
	if bytes.IndexByte(spec, ',') >= 0 {
		return 0, 0, false
	}
	a, b, found := bytes.Cut(spec, []byte{'-'})
	if !found {
		return 0, 0, false
	}
	a, b = bytes.TrimSpace(a), bytes.TrimSpace(b)
	if len(a) == 0 { // suffix: the last b bytes
		k, err := strconv.ParseInt(string(b), 10, 64)
		if err != nil || k < 0 {
			return 0, 0, false
		}
		if k == 0 || size == 0 {
			return 0, -1, true
		}
		k = min(k, size)
		return size - k, k, true
	}
	first, err := strconv.ParseInt(string(a), 10, 64)
	if err != nil || first < 0 {
		return 0, 0, false
	}
	last := size - 1
	if len(b) > 0 {
		if last, err = strconv.ParseInt(string(b), 10, 64); err != nil || last < first {
			return 0, 0, false
		}
		last = min(last, size-1)
	}
	if first >= size {
		return 0, -1, true
	}
	return first, last - first + 1, true
}

// staticTypes are the content types of the web's usual files, whatever the system's
// mime.types says (mime.TypeByExtension reads it for the others).
var staticTypes = map[string]string{
	".html": "text/html; charset=utf-8", ".htm": "text/html; charset=utf-8",
	".css": "text/css; charset=utf-8", ".js": "text/javascript; charset=utf-8",
	".mjs": "text/javascript; charset=utf-8", ".json": "application/json",
	".map": "application/json", ".txt": "text/plain; charset=utf-8",
	".xml": "text/xml; charset=utf-8", ".svg": "image/svg+xml", ".png": "image/png",
	".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".gif": "image/gif", ".webp": "image/webp",
	".avif": "image/avif", ".ico": "image/x-icon", ".woff": "font/woff", ".woff2": "font/woff2",
	".ttf": "font/ttf", ".otf": "font/otf", ".wasm": "application/wasm", ".pdf": "application/pdf",
	".mp4": "video/mp4", ".webm": "video/webm", ".mp3": "audio/mpeg", ".zip": "application/zip",
	".webmanifest": "application/manifest+json",
}

func contentType(name string) string {
	ext := strings.ToLower(path.Ext(name))
	if t, ok := staticTypes[ext]; ok {
		return t
	}
	if t := mime.TypeByExtension(ext); t != "" {
		return t
	}
	return "application/octet-stream"
}
