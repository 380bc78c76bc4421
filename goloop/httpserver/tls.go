package httpserver

// tls.go: TLS configuration: the options, loading the certificates and keys (again on
// SIGHUP: ReloadTLS), picking a certificate per handshake (SNI), wrapping an accepted
// connection, and what a connection's TLS reports (TLSInfo, TrackClose). The output of a TLS
// connection is tlsrecords.go's; encrypted keys are decrypted by keydecrypt.go.

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
)

// TLSOptions are the server's TLS files and client-certificate policy (uvicorn's
// --ssl-certfile, --ssl-keyfile, --ssl-keyfile-password, --ssl-ca-certs, --ssl-cert-reqs).
type TLSOptions struct {
	CertFile string // PEM: the certificate, then its chain
	KeyFile  string // PEM private key (the cert file if empty); encrypted if Password is set
	// Certs are more certificates (goloop's extension of uvicorn's options): the handshake
	// picks the first of CertFile, Certs... that suits the client (by SNI, as crypto/tls
	// picks among tls.Config.Certificates), else the first.
	Certs    []CertKey
	Password string // of every encrypted key
	CAFile   string // PEM CAs that client certificates are verified against
	// CertReqs is ssl's verify mode for client certificates: 0 none asked, 1 optional
	// (verified if given), 2 required.
	CertReqs int
}

// CertKey is a certificate file and its key file (the certificate's file if empty).
type CertKey struct{ CertFile, KeyFile string }

func (o *TLSOptions) pairs() []CertKey {
	if o.CertFile == "" {
		return o.Certs
	}
	return append([]CertKey{{o.CertFile, o.KeyFile}}, o.Certs...)
}

// tlsState is the server's TLS: the options (for ReloadTLS) and the current files,
// swapped whole by a reload; each handshake takes the ones current at its start.
type tlsState struct {
	mu   sync.Mutex // serializes loads
	opts TLSOptions
	cur  atomic.Pointer[tlsLoaded]
}

// tlsLoaded is one load of the files: the config of each certificate (one[i] offers
// certificate i only: the one the handshake picked) and the certificates' PEM.
type tlsLoaded struct {
	certs []tls.Certificate
	one   []*tls.Config
	pem   []string // each certificate's leaf, PEM (the tls scope extension's server_cert)
}

// SetTLS makes every connection accepted from now on TLS (ALPN: h2 unless Config.NoH2,
// http/1.1). It loads the files now and reports their errors.
func (s *Server) SetTLS(o TLSOptions) error {
	if o.CertReqs < 0 || o.CertReqs > 2 {
		return fmt.Errorf("ssl_cert_reqs must be 0 (none), 1 (optional) or 2 (required), not %d", o.CertReqs)
	}
	if o.CertReqs != 0 && o.CAFile == "" {
		return errors.New("client certificates (ssl_cert_reqs 1 or 2) need ssl_ca_certs to verify them")
	}
	if len(o.pairs()) == 0 {
		return errors.New("no certificate file")
	}
	ts := &tlsState{opts: o}
	l, err := s.loadTLS(o)
	if err != nil {
		return err
	}
	ts.cur.Store(l)
	s.tls.Store(ts)
	return nil
}

// ReloadTLS reads the files again (SIGHUP); the next handshakes use them. On error the
// current ones stay.
func (s *Server) ReloadTLS() error {
	ts := s.tls.Load()
	if ts == nil {
		return errors.New("the server has no TLS")
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	l, err := s.loadTLS(ts.opts)
	if err != nil {
		return err
	}
	ts.cur.Store(l)
	return nil
}

func loadCert(ck CertKey, password string) (tls.Certificate, error) {
	certPEM, err := os.ReadFile(ck.CertFile)
	if err != nil {
		return tls.Certificate{}, err
	}
	keyFile := ck.KeyFile
	if keyFile == "" {
		keyFile = ck.CertFile
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return tls.Certificate{}, err
	}
	keyPEM, err = decryptKeyPEM(keyPEM, password)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("%s: %w", keyFile, err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("%s: %w", ck.CertFile, err)
	}
	return cert, nil
}

func (s *Server) loadTLS(o TLSOptions) (*tlsLoaded, error) {
	l := &tlsLoaded{}
	for _, ck := range o.pairs() {
		cert, err := loadCert(ck, o.Password)
		if err != nil {
			return nil, err
		}
		l.certs = append(l.certs, cert)
		l.pem = append(l.pem, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]})))
	}
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
	}
	if s.cfg.NoH2 {
		cfg.NextProtos = []string{"http/1.1"}
	} else if s.cfg.H2Only {
		cfg.NextProtos = []string{"h2"}
	} else {
		cfg.NextProtos = []string{"h2", "http/1.1"}
	}
	if o.CAFile != "" {
		ca, err := os.ReadFile(o.CAFile)
		if err != nil {
			return nil, err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(ca) {
			return nil, fmt.Errorf("%s: no PEM certificate found", o.CAFile)
		}
		cfg.ClientCAs = pool
		if err := s.tlsExtra.apply(cfg, ca); err != nil { // --ssl-crl (tlsops.go)
			return nil, err
		}
	} else if err := s.tlsExtra.apply(cfg, nil); err != nil { // --ssl-protocol-min (tlsops.go)
		return nil, err
	}
	switch o.CertReqs {
	case 1:
		cfg.ClientAuth = tls.VerifyClientCertIfGiven
	case 2:
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	for i := range l.certs {
		one := cfg.Clone()
		one.Certificates = l.certs[i : i+1]
		l.one = append(l.one, one)
	}
	return l, nil
}

// configFor is the connection's GetConfigForClient: it picks the certificate as crypto/tls
// picks among several (the first the client supports, by SNI and algorithms; else the
// first) and remembers it (the tls scope extension's server_cert).
func (t *tlsConn) configFor(chi *tls.ClientHelloInfo) (*tls.Config, error) {
	l := t.ts.cur.Load()
	i := 0
	if len(l.certs) > 1 {
		for j := range l.certs {
			if chi.SupportsCertificate(&l.certs[j]) == nil {
				i = j
				break
			}
		}
	}
	t.loaded, t.cert = l, i
	return l.one[i], nil
}

// wrapTLS makes nc a TLS server connection if the server has TLS (the handshake runs at
// the connection goroutine's first read).
func (s *Server) wrapTLS(nc net.Conn) net.Conn {
	ts := s.tls.Load()
	if ts == nil {
		return nc
	}
	k := &tlsSink{Conn: nc}
	k.cond.L = &k.mu
	if sc, ok := nc.(syscall.Conn); ok {
		k.rc, _ = sc.SyscallConn()
	}
	t := &tlsConn{ts: ts, s: s, sink: k}
	t.Conn = tls.Server(k, &tls.Config{GetConfigForClient: t.configFor})
	return t
}

// TLS reports whether c is a TLS connection (the scope's scheme is "https").
func (c *Conn) TLS() bool {
	if c.q != nil {
		return true // QUIC
	}
	_, ok := c.nc.(*tlsConn)
	return ok
}

// alpnH2 reports whether c is TLS and its handshake chose h2.
func (c *Conn) alpnH2() bool {
	t, ok := c.nc.(*tlsConn)
	return ok && t.ConnectionState().NegotiatedProtocol == "h2"
}

// TLSInfo is what ASGI's tls extension reports of a connection.
type TLSInfo struct {
	ServerCert  string   // PEM of the certificate the server sent ("" if not known)
	ClientChain []string // PEM of the client's certificate and its chain (none: empty)
	ClientName  string   // the client certificate's subject, RFC 4514 ("" without one)
	Version     uint16   // tls.VersionTLS13...
	CipherSuite uint16
}

// TLSInfo returns c's TLS details (nil for a plain connection). Call it once the
// handshake is complete (a request of c was dispatched).
func (c *Conn) TLSInfo() *TLSInfo {
	if c.q != nil {
		return c.h3TLSInfo()
	}
	t, ok := c.nc.(*tlsConn)
	if !ok {
		return nil
	}
	st := t.ConnectionState()
	info := &TLSInfo{Version: st.Version, CipherSuite: st.CipherSuite}
	if l := t.loaded; l != nil {
		info.ServerCert = l.pem[t.cert]
	}
	peerInfo(info, st.PeerCertificates)
	return info
}

// peerInfo sets info's client chain and name from the client's certificates.
func peerInfo(info *TLSInfo, certs []*x509.Certificate) {
	for _, pc := range certs {
		info.ClientChain = append(info.ClientChain, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: pc.Raw})))
	}
	if len(certs) > 0 {
		info.ClientName = certs[0].Subject.String()
	}
}

// TrackClose asks for an EvConnClosed event (its Req a placeholder whose Conn is c) when
// the TLS connection c closes, so that what the application's side keeps per connection
// (the tls extension) can be released. False: c is not TLS or already closed (no event).
func (c *Conn) TrackClose() bool {
	if c.q != nil {
		return c.h3TrackClose()
	}
	t, ok := c.nc.(*tlsConn)
	if !ok {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	t.tracked = c
	return true
}
