package httpserver

import (
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"io"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func tlsGet(addr string, cfg *tls.Config) error {
	tc, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		return err
	}
	defer tc.Close()
	tc.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(tc, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	buf := make([]byte, 100)
	_, err = io.ReadAtLeast(tc, buf, 12) // TLS 1.3: a refused certificate shows at the first read
	return err
}

func startTLSExtra(t *testing.T, p *testPKI, x TLSExtra, reqs int) (string, error) {
	a, addr := startServer(t, Config{}, hello)
	if err := a.s.SetTLSExtra(x); err != nil {
		return "", err
	}
	ca := ""
	if reqs > 0 {
		ca = p.caFile
	}
	return addr, a.s.SetTLS(TLSOptions{CertFile: p.certFile, KeyFile: p.keyFile, CAFile: ca, CertReqs: reqs})
}

func TestTLSMinVersion(t *testing.T) {
	p := newPKI(t)
	addr, err := startTLSExtra(t, p, TLSExtra{MinVersion: tls.VersionTLS13}, 0)
	if err != nil {
		t.Fatal(err)
	}
	old := p.client("http/1.1")
	old.MaxVersion = tls.VersionTLS12
	if err := tlsGet(addr, old); err == nil {
		t.Fatal("TLS 1.2 accepted with the lowest version 1.3")
	}
	if err := tlsGet(addr, p.client("http/1.1")); err != nil {
		t.Fatal(err)
	}
	// the default: 1.2 accepted
	addr, err = startTLSExtra(t, p, TLSExtra{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := tlsGet(addr, old); err != nil {
		t.Fatal(err)
	}
	if err := New(Config{}).SetTLSExtra(TLSExtra{MinVersion: tls.VersionTLS11}); err == nil {
		t.Fatal("TLS 1.1 accepted as the lowest version")
	}
}

// writeCRL writes a CRL signed by issuer (key) revoking serials, PEM or DER.
func writeCRL(t *testing.T, issuer *x509.Certificate, key *ecdsa.PrivateKey, asPEM bool, serials ...*big.Int) string {
	tpl := &x509.RevocationList{Number: big.NewInt(1), ThisUpdate: time.Now().Add(-time.Minute),
		NextUpdate: time.Now().Add(time.Hour)}
	for _, s := range serials {
		tpl.RevokedCertificateEntries = append(tpl.RevokedCertificateEntries,
			x509.RevocationListEntry{SerialNumber: s, RevocationTime: time.Now().Add(-time.Minute)})
	}
	der, err := x509.CreateRevocationList(rand.Reader, tpl, issuer, key)
	if err != nil {
		t.Fatal(err)
	}
	data := der
	if asPEM {
		data = pem.EncodeToMemory(&pem.Block{Type: "X509 CRL", Bytes: der})
	}
	path := filepath.Join(t.TempDir(), "crl")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestTLSCRL(t *testing.T) {
	p := newPKI(t)
	revokedCert, _, rc, rk := makeCert(t, "revoked client", p.ca, p.caKey, false, true)
	revoked, _ := tls.X509KeyPair(rc, rk)
	with := func(c tls.Certificate) *tls.Config {
		cfg := p.client("http/1.1")
		cfg.Certificates = []tls.Certificate{c}
		return cfg
	}
	for _, asPEM := range []bool{true, false} {
		crl := writeCRL(t, p.ca, p.caKey, asPEM, revokedCert.SerialNumber, big.NewInt(12345))
		for _, reqs := range []int{1, 2} {
			addr, err := startTLSExtra(t, p, TLSExtra{CRLFile: crl}, reqs)
			if err != nil {
				t.Fatal(err)
			}
			if err := tlsGet(addr, with(revoked)); err == nil {
				t.Fatalf("pem=%v reqs=%d: a revoked client certificate was accepted", asPEM, reqs)
			}
			if err := tlsGet(addr, with(p.clientCert)); err != nil {
				t.Fatalf("pem=%v reqs=%d: a valid client certificate: %v", asPEM, reqs, err)
			}
		}
	}
	// a CRL not signed by a client CA, a file that is not a CRL, a missing one: SetTLS fails
	other, otherKey, _, _ := makeCert(t, "other CA", nil, nil, true, false)
	for name, path := range map[string]string{
		"foreign":   writeCRL(t, other, otherKey, true, big.NewInt(1)),
		"not a CRL": p.caFile,
		"missing":   filepath.Join(t.TempDir(), "none"),
	} {
		if _, err := startTLSExtra(t, p, TLSExtra{CRLFile: path}, 2); err == nil {
			t.Fatalf("%s: accepted", name)
		}
	}
}
