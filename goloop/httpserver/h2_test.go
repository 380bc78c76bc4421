package httpserver

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// send is respond with backpressure: a paused sender waits for its wake-up.
func (a *fakeApp) send(r *Request, body []byte, more bool) error {
	flags, err := r.Send(body, more)
	return a.waitRoom(r, flags, err)
}

// waitRoom waits, if a send paused r (flags), until r may send again.
func (a *fakeApp) waitRoom(r *Request, flags int, err error) error {
	a.s.Flush()
	for err == nil && flags&SendPaused != 0 {
		select {
		case <-a.wakeCh(r):
		case <-time.After(10 * time.Second):
			panic("send: no wake-up")
		}
		var ok bool
		ok, err = r.SendReady()
		if ok {
			break
		}
	}
	return err
}

// quiet answers 204, whatever became of the client.
func quiet(a *fakeApp, r *Request) {
	r.Start(204, nil)
	r.Send(nil, false)
	a.s.Flush()
}

// h2cClient is an http.Client speaking h2c with prior knowledge.
func h2cClient() *http.Client {
	return &http.Client{Transport: &http2.Transport{
		AllowHTTP: true,
		DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
			return net.Dial(network, addr)
		},
	}, Timeout: 20 * time.Second}
}

func echoApp(a *fakeApp, r *Request) {
	body := a.readBody(r, false)
	var sb strings.Builder
	for i := 0; i < r.NumHeaders(); i++ {
		n, v := r.Header(i)
		fmt.Fprintf(&sb, "%s=%s;", n, v)
	}
	r.Start(200, []byte("content-type: text/plain\r\nx-headers: "+sb.String()+"\r\nx-version: "+fmt.Sprint(r.Major)+"\r\n"))
	if string(r.Path()) == "/big" {
		chunk := bytes.Repeat([]byte("x"), 64<<10)
		for i := 0; i < 64; i++ { // 4 MiB in parts, more than the client's windows
			if err := a.send(r, chunk, true); err != nil {
				return
			}
		}
		a.send(r, nil, false)
		return
	}
	a.send(r, append([]byte(fmt.Sprintf("%s %s %d:", r.Method(), r.Path(), len(body))), body[:min(len(body), 16)]...), false)
}

func TestH2cPriorKnowledge(t *testing.T) {
	a, addr := startServer(t, Config{ServerHeader: true}, echoApp)
	cl := h2cClient()
	resp, err := cl.Get("http://" + addr + "/p?q=1")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.ProtoMajor != 2 || string(b) != "GET /p 0:" {
		t.Fatalf("%s %q", resp.Proto, b)
	}
	if h := resp.Header.Get("x-headers"); !strings.HasPrefix(h, "host="+addr+";") || strings.Contains(h, ":") && strings.Contains(h, ":method") {
		t.Fatalf("headers %q", h)
	}
	if resp.Header.Get("server") != "goloop" || resp.Header.Get("x-version") != "2" {
		t.Fatalf("response headers %v", resp.Header)
	}
	// many concurrent streams on the one connection (fewer than 100: past the server's
	// MAX_CONCURRENT_STREAMS the client would open another connection)
	var wg sync.WaitGroup
	errs := make(chan error, 90)
	for i := 0; i < 90; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := cl.Post(fmt.Sprintf("http://%s/s%d", addr, i), "text/plain", strings.NewReader("body"))
			if err != nil {
				errs <- err
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if want := fmt.Sprintf("POST /s%d 4:body", i); string(b) != want {
				errs <- fmt.Errorf("got %q want %q", b, want)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := a.s.Connections(); n != 1 {
		t.Fatalf("%d connections, want 1", n)
	}
}

func TestH2FlowControl(t *testing.T) {
	_, addr := startServer(t, Config{}, echoApp)
	cl := h2cClient()
	big := bytes.Repeat([]byte("0123456789abcdef"), 3<<16) // 3 MiB: more than both windows
	resp, err := cl.Post("http://"+addr+"/up", "application/octet-stream", bytes.NewReader(big))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if want := fmt.Sprintf("POST /up %d:0123456789abcdef", len(big)); string(b) != want {
		t.Fatalf("got %q", b)
	}
	resp, err = cl.Get("http://" + addr + "/big")
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil || n != 64*64<<10 {
		t.Fatalf("big response: %d bytes, %v", n, err)
	}
}

// rawH2 is a client connection driven frame by frame.
type rawH2 struct {
	nc  net.Conn
	fr  *http2.Framer
	enc *hpack.Encoder
	hb  bytes.Buffer
}

func dialH2(t *testing.T, addr string) *rawH2 {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(20 * time.Second))
	c := &rawH2{nc: nc}
	c.fr = http2.NewFramer(nc, nc)
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.enc = hpack.NewEncoder(&c.hb)
	io.WriteString(nc, http2.ClientPreface)
	c.fr.WriteSettings()
	return c
}

func (c *rawH2) headers(id uint32, end bool, method, path string) {
	c.hb.Reset()
	for _, kv := range [][2]string{{":method", method}, {":scheme", "http"}, {":path", path}, {":authority", "x"}} {
		c.enc.WriteField(hpack.HeaderField{Name: kv[0], Value: kv[1]})
	}
	c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.hb.Bytes(), EndStream: end, EndHeaders: true})
}

// until reads frames until f returns true.
func (c *rawH2) until(t *testing.T, f func(http2.Frame) bool) {
	t.Helper()
	for {
		fr, err := c.fr.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		if f(fr) {
			return
		}
	}
}

func TestH2ResetDisconnects(t *testing.T) {
	got := make(chan RecvState, 1)
	started := make(chan struct{}, 1)
	_, addr := startServer(t, Config{}, func(a *fakeApp, r *Request) {
		started <- struct{}{}
		for {
			_, st := a.receive(r)
			if st != RecvBody {
				got <- st
				return
			}
		}
	})
	c := dialH2(t, addr)
	c.headers(1, false, "POST", "/wait")
	<-started
	c.fr.WriteRSTStream(1, http2.ErrCodeCancel)
	select {
	case st := <-got:
		if st != RecvDisconnect {
			t.Fatalf("receive: %v, want disconnect", st)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no http.disconnect after RST_STREAM")
	}
}

func TestH2RapidResetGoAway(t *testing.T) {
	a, addr := startServer(t, Config{H2MaxResets: 50}, func(a *fakeApp, r *Request) {
		a.receive(r)
		r.Start(200, nil)
		r.Send(nil, false)
	})
	c := dialH2(t, addr)
	for i := 0; i < 500; i++ {
		id := uint32(2*i + 1)
		c.headers(id, false, "POST", "/")
		c.fr.WriteRSTStream(id, http2.ErrCodeCancel)
	}
	var code http2.ErrCode
	c.until(t, func(f http2.Frame) bool {
		if g, ok := f.(*http2.GoAwayFrame); ok {
			code = g.ErrCode
			return true
		}
		return false
	})
	if code != http2.ErrCodeEnhanceYourCalm {
		t.Fatalf("GOAWAY %v", code)
	}
	if n := a.seenCount(); n > 60 {
		t.Fatalf("%d of the reset streams reached the application", n)
	}
}

func TestH2MaxConcurrentStreams(t *testing.T) {
	release := make(chan struct{})
	_, addr := startServer(t, Config{}, func(a *fakeApp, r *Request) {
		<-release
		r.Start(200, nil)
		r.Send(nil, false)
	})
	defer close(release)
	c := dialH2(t, addr)
	for i := 0; i < h2MaxStreams+1; i++ {
		c.headers(uint32(2*i+1), true, "GET", "/")
	}
	c.until(t, func(f http2.Frame) bool {
		rs, ok := f.(*http2.RSTStreamFrame)
		if ok && (rs.StreamID != 2*h2MaxStreams+1 || rs.ErrCode != http2.ErrCodeRefusedStream) {
			t.Fatalf("RST_STREAM %d %v", rs.StreamID, rs.ErrCode)
		}
		return ok
	})
}

func TestH2HeaderFlood(t *testing.T) {
	_, addr := startServer(t, Config{MaxHeadSize: 4096}, quiet)
	c := dialH2(t, addr)
	c.headers(1, true, "GET", "/")
	// a CONTINUATION flood on stream 3: never-ending header block
	c.hb.Reset()
	c.enc.WriteField(hpack.HeaderField{Name: ":method", Value: "GET"})
	c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: c.hb.Bytes()})
	go func() {
		blk := bytes.Repeat([]byte{0x40, 0x01, 'x', 0x7f, 0x7f}, 3000)
		for i := 0; i < 100; i++ {
			if c.fr.WriteContinuation(3, false, blk[:15000]) != nil {
				return
			}
		}
	}()
	c.until(t, func(f http2.Frame) bool { _, ok := f.(*http2.GoAwayFrame); return ok })
}

func TestH2GracefulGoAway(t *testing.T) {
	release := make(chan struct{})
	a, addr := startServer(t, Config{}, func(a *fakeApp, r *Request) {
		<-release
		a.respond(r, 200, "", "done")
	})
	c := dialH2(t, addr)
	c.headers(1, true, "GET", "/")
	for a.seenCount() == 0 {
		time.Sleep(time.Millisecond)
	}
	a.s.Close()
	c.until(t, func(f http2.Frame) bool { _, ok := f.(*http2.GoAwayFrame); return ok })
	close(release)
	var body string
	c.until(t, func(f http2.Frame) bool {
		if d, ok := f.(*http2.DataFrame); ok {
			body += string(d.Data())
			return d.StreamEnded()
		}
		return false
	})
	if body != "done" {
		t.Fatalf("body %q", body)
	}
	select {
	case <-a.s.Idle():
	case <-time.After(10 * time.Second):
		t.Fatal("connection not closed after its last stream")
	}
}

// ---- TLS ----

type testPKI struct {
	dir                       string
	caPEM                     []byte
	ca                        *x509.Certificate
	caKey                     *ecdsa.PrivateKey
	certFile, keyFile, caFile string
	clientCert                tls.Certificate
}

func makeCert(t *testing.T, cn string, ca *x509.Certificate, caKey *ecdsa.PrivateKey, isCA, client bool) (*x509.Certificate, *ecdsa.PrivateKey, []byte, []byte) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		DNSNames: []string{cn}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	if isCA {
		tpl.IsCA, tpl.BasicConstraintsValid, tpl.KeyUsage = true, true, x509.KeyUsageCertSign|x509.KeyUsageCRLSign
	} else if client {
		tpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	} else {
		tpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	}
	parent, signer := tpl, key
	if ca != nil {
		parent, signer = ca, caKey
	}
	der, err := x509.CreateCertificate(rand.Reader, tpl, parent, &key.PublicKey, signer)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	kder, _ := x509.MarshalPKCS8PrivateKey(key)
	return cert, key, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})
}

func newPKI(t *testing.T) *testPKI {
	p := &testPKI{dir: t.TempDir()}
	var caPEM []byte
	p.ca, p.caKey, caPEM, _ = makeCert(t, "test CA", nil, nil, true, false)
	p.caPEM = caPEM
	p.caFile = filepath.Join(p.dir, "ca.pem")
	os.WriteFile(p.caFile, caPEM, 0o600)
	p.certFile, p.keyFile = filepath.Join(p.dir, "cert.pem"), filepath.Join(p.dir, "key.pem")
	p.issue(t, "localhost")
	_, _, ccert, ckey := makeCert(t, "client", p.ca, p.caKey, false, true)
	p.clientCert, _ = tls.X509KeyPair(ccert, ckey)
	return p
}

// issue writes a new server certificate for cn to certFile/keyFile.
func (p *testPKI) issue(t *testing.T, cn string) {
	_, _, c, k := makeCert(t, cn, p.ca, p.caKey, false, false)
	os.WriteFile(p.certFile, c, 0o600)
	os.WriteFile(p.keyFile, k, 0o600)
}

func (p *testPKI) client(protos ...string) *tls.Config {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(p.caPEM)
	return &tls.Config{RootCAs: pool, ServerName: "localhost", NextProtos: protos}
}

func startTLS(t *testing.T, p *testPKI, reqs int, h func(a *fakeApp, r *Request)) (*fakeApp, string) {
	a, addr := startServer(t, Config{}, h)
	ca := ""
	if reqs > 0 {
		ca = p.caFile
	}
	if err := a.s.SetTLS(TLSOptions{CertFile: p.certFile, KeyFile: p.keyFile, CAFile: ca, CertReqs: reqs}); err != nil {
		t.Fatal(err)
	}
	return a, addr
}

func TestTLSAlpn(t *testing.T) {
	p := newPKI(t)
	_, addr := startTLS(t, p, 0, echoApp)
	// HTTP/1.1 over TLS (where Upgrade: h2c is ignored: h2up_test.go)
	tc, err := tls.Dial("tcp", addr, p.client("http/1.1"))
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	io.WriteString(tc, h2cUpgradeReq("body", false))
	checkHTTP11(t, "TLS", tc, "body")
	// h2 by ALPN
	cl := &http.Client{Transport: &http2.Transport{TLSClientConfig: p.client()}, Timeout: 10 * time.Second}
	resp, err := cl.Get("https://" + addr + "/two")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.ProtoMajor != 2 || string(b) != "GET /two 0:" {
		t.Fatalf("%s %q", resp.Proto, b)
	}
}

func TestTLSClientCerts(t *testing.T) {
	p := newPKI(t)
	get := func(addr string, withCert bool) error {
		cfg := p.client("http/1.1")
		if withCert {
			cfg.Certificates = []tls.Certificate{p.clientCert}
		}
		tc, err := tls.Dial("tcp", addr, cfg)
		if err != nil {
			return err
		}
		defer tc.Close()
		io.WriteString(tc, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		buf := make([]byte, 100)
		_, err = io.ReadAtLeast(tc, buf, 12) // TLS 1.3: a refused certificate shows at the first read
		return err
	}
	_, req := startTLS(t, p, 2, hello)
	if err := get(req, false); err == nil {
		t.Fatal("required: a client without a certificate was served")
	}
	if err := get(req, true); err != nil {
		t.Fatal(err)
	}
	_, opt := startTLS(t, p, 1, hello)
	if err := get(opt, false); err != nil {
		t.Fatal(err)
	}
	if err := get(opt, true); err != nil {
		t.Fatal(err)
	}
	a, _ := startServer(t, Config{}, hello)
	if err := a.s.SetTLS(TLSOptions{CertFile: p.certFile, KeyFile: p.keyFile, CertReqs: 2}); err == nil {
		t.Fatal("client certificates required without CA: no error")
	}
}

func TestTLSReload(t *testing.T) {
	p := newPKI(t)
	a, addr := startTLS(t, p, 0, hello)
	cn := func() string {
		tc, err := tls.Dial("tcp", addr, p.client())
		if err != nil {
			t.Fatal(err)
		}
		defer tc.Close()
		return tc.ConnectionState().PeerCertificates[0].Subject.CommonName
	}
	if got := cn(); got != "localhost" {
		t.Fatal(got)
	}
	p.issue(t, "renewed")
	os.WriteFile(p.certFile+".keep", nil, 0o600)
	if got := cn(); got != "localhost" {
		t.Fatalf("changed before the reload: %s", got)
	}
	if err := a.s.ReloadTLS(); err != nil {
		t.Fatal(err)
	}
	cfgName := "renewed"
	tc, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := tc.ConnectionState().PeerCertificates[0].Subject.CommonName; got != cfgName {
		t.Fatalf("after reload: %s", got)
	}
	tc.Close()
	// a broken file: the reload fails, the old certificate stays
	os.WriteFile(p.keyFile, []byte("not a key"), 0o600)
	if err := a.s.ReloadTLS(); err == nil {
		t.Fatal("reload of a broken key: no error")
	}
	tc, err = tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := tc.ConnectionState().PeerCertificates[0].Subject.CommonName; got != cfgName {
		t.Fatalf("after a failed reload: %s", got)
	}
	tc.Close()
}
