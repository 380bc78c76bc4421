package httpserver

import (
	"crypto/tls"
	"encoding/pem"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestTLSSNI: several certificates, the one for the client's server name is served (the
// first when none matches), and SIGHUP's reload reloads all of them.
func TestTLSSNI(t *testing.T) {
	p := newPKI(t)
	var pairs []CertKey
	for _, cn := range []string{"a.test", "b.test"} {
		_, _, c, k := makeCert(t, cn, p.ca, p.caKey, false, false)
		cf, kf := filepath.Join(p.dir, cn+".pem"), filepath.Join(p.dir, cn+".key")
		os.WriteFile(cf, c, 0o600)
		os.WriteFile(kf, k, 0o600)
		pairs = append(pairs, CertKey{cf, kf})
	}
	a, addr := startServer(t, Config{}, hello)
	if err := a.s.SetTLS(TLSOptions{Certs: pairs}); err != nil {
		t.Fatal(err)
	}
	served := func(name string) string {
		cfg := p.client()
		cfg.ServerName = name
		tc, err := tls.Dial("tcp", addr, cfg)
		if name == "c.test" { // no certificate for it: the first one, which does not verify
			cfg.InsecureSkipVerify = true
			tc, err = tls.Dial("tcp", addr, cfg)
		}
		if err != nil {
			t.Fatal(name, err)
		}
		defer tc.Close()
		return tc.ConnectionState().PeerCertificates[0].Subject.CommonName
	}
	for _, name := range []string{"a.test", "b.test", "c.test"} {
		want := strings.Replace(name, "c.", "a.", 1)
		if got := served(name); got != want {
			t.Fatalf("SNI %s: served %s", name, got)
		}
	}
	// the reload reads every pair again
	_, _, c, k := makeCert(t, "b.test", p.ca, p.caKey, false, false)
	os.WriteFile(pairs[1].CertFile, c, 0o600)
	os.WriteFile(pairs[1].KeyFile, k, 0o600)
	if err := a.s.ReloadTLS(); err != nil {
		t.Fatal(err)
	}
	cfg := p.client()
	cfg.ServerName = "b.test"
	tc, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(c)
	if got := tc.ConnectionState().PeerCertificates[0].Raw; string(got) != string(blk.Bytes) {
		t.Fatal("b.test's new certificate is not served after the reload")
	}
	tc.Close()
}

// TestTLSInfo: the connection's TLS details (the tls scope extension) and the event that
// tells when a tracked connection closed.
func TestTLSInfo(t *testing.T) {
	p := newPKI(t)
	infos := make(chan *TLSInfo, 4)
	a, addr := startTLS(t, p, 1, func(a *fakeApp, r *Request) {
		c := r.Conn()
		if c.TrackClose() {
			infos <- c.TLSInfo()
		}
		hello(a, r)
	})
	a.other = make(chan Event, 4)
	cfg := p.client("http/1.1")
	cfg.Certificates = []tls.Certificate{p.clientCert}
	cfg.MaxVersion = tls.VersionTLS12
	cfg.CipherSuites = []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256}
	tc, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(tc, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	buf := make([]byte, 100)
	io.ReadAtLeast(tc, buf, 12)
	info := <-infos
	srvPEM, _ := os.ReadFile(p.certFile)
	if info.Version != tls.VersionTLS12 || info.CipherSuite != tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256 ||
		info.ServerCert != string(srvPEM) {
		t.Fatalf("info %x %x %q", info.Version, info.CipherSuite, info.ServerCert)
	}
	if len(info.ClientChain) != 1 || info.ClientName != "CN=client" ||
		!strings.HasPrefix(info.ClientChain[0], "-----BEGIN CERTIFICATE-----") {
		t.Fatalf("client %q %d", info.ClientName, len(info.ClientChain))
	}
	tc.Close()
	select {
	case ev := <-a.other:
		if ev.Kind != EvConnClosed || ev.Req.Conn() == nil {
			t.Fatalf("event %v", ev)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no EvConnClosed for a tracked connection")
	}
	// without a client certificate
	tc, err = tls.Dial("tcp", addr, p.client("http/1.1"))
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	io.WriteString(tc, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	io.ReadAtLeast(tc, buf, 12)
	info = <-infos
	if info.ClientChain != nil || info.ClientName != "" || info.Version != tls.VersionTLS13 {
		t.Fatal(fmt.Sprintf("%+v", info))
	}
}
