package httpserver

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/des"
	"crypto/pbkdf2"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"errors"
	"fmt"
	"hash"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
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

// tlsConn is a TLS connection whose records are written by the connection's flush: Flush
// encrypts the output on the calling thread (the loop's) and writes the records with the
// same non-blocking write as a plain connection; what the socket does not take is left to
// the writer goroutine. Its Close does not wait: tls.Conn.Close sends close_notify with a
// write that may block (up to 5 s on a peer that does not read), and the engine closes
// connections with its lock held, perhaps on the loop thread.
type tlsConn struct {
	*tls.Conn
	sink   *tlsSink
	ts     *tlsState
	s      *Server
	loaded *tlsLoaded // set by the handshake (configFor)
	cert   int        // the certificate it picked

	mu      sync.Mutex
	closed  bool
	tracked *Conn // TrackClose: an EvConnClosed is queued when it closes
}

func (t *tlsConn) Close() error {
	t.mu.Lock()
	tracked := t.tracked
	if t.closed {
		tracked = nil
	}
	t.closed = true
	t.mu.Unlock()
	if tracked != nil {
		t.s.push(Event{Kind: EvConnClosed, Req: &Request{c: tracked}})
	}
	go t.Conn.Close()
	return nil
}

// Write is the writer goroutine's (blocking): it owns the output while it encrypts p, a
// chunk at a time, and writes each chunk's records at once; they are on the socket when it
// returns.
func (t *tlsConn) Write(p []byte) (n int, err error) {
	k := t.sink
	for n < len(p) && err == nil {
		k.mu.Lock()
		for k.owned {
			k.cond.Wait()
		}
		k.owned = true
		k.mu.Unlock()
		m := min(len(p)-n, tlsChunk)
		_, err = t.Conn.Write(p[n : n+m]) // the records queue in pend
		n += m
		if werr := k.writeAll(); err == nil {
			err = werr
		}
	}
	return n, err
}

// tlsChunk is how much plaintext a non-blocking write encrypts before it tries the socket:
// the loop thread encrypts no more than about what the socket takes.
const tlsChunk = 64 << 10

// tryWrite encrypts plain (up to where the socket is full) and writes the records without
// blocking. n: the plaintext bytes taken; EAGAIN: records wait in the sink (the socket is
// full, or another writer owns it) and the writer goroutine must drain them.
func (t *tlsConn) tryWrite(plain []byte) (n int, err error) {
	k := t.sink
	if k.rc == nil { // no descriptor: everything goes through the writer goroutine
		return 0, unix.EAGAIN
	}
	k.mu.Lock()
	if k.owned { // a blocking write is under way (handshake, alert, close_notify)
		k.mu.Unlock()
		return 0, unix.EAGAIN
	}
	k.owned = true
	k.mu.Unlock()
	for {
		m := min(len(plain)-n, tlsChunk)
		if _, err = t.Conn.Write(plain[n : n+m]); err != nil { // records appended to k.pend
			k.mu.Lock()
			k.releaseLocked()
			k.mu.Unlock()
			return n, err
		}
		n += m
		last := n == len(plain)
		if err = k.writeSome(last); err != nil || last {
			return n, err
		}
	}
}

// tlsSink is the TCP connection under a TLS connection: crypto/tls reads the socket, and
// the records it writes queue in pend. Whoever owns the socket's output writes pend: the
// flush's non-blocking write, or a blocking writer (the writer goroutine; the reader
// goroutine for the handshake and alerts; Close for close_notify). A record written while
// the output is owned is left to the owner, which writes pend until it is empty before it
// lets go; so records leave in the order crypto/tls made them (its write lock orders the
// appends).
type tlsSink struct {
	net.Conn
	rc    syscall.RawConn
	mu    sync.Mutex
	cond  sync.Cond // the output was let go
	pend  []byte    // records not written yet
	owned bool
	err   error // a write failed: every later write fails
	conn  *Conn // the connection (nil until it has one): its minimum response rate's clock
}

// Write queues a record; if no one owns the output, the caller writes pend (blocking).
func (k *tlsSink) Write(p []byte) (int, error) {
	k.mu.Lock()
	if k.err != nil {
		err := k.err
		k.mu.Unlock()
		return 0, err
	}
	k.pend = append(k.pend, p...)
	if k.owned {
		k.mu.Unlock()
		return len(p), nil
	}
	k.owned = true
	k.mu.Unlock()
	if err := k.writeAll(); err != nil {
		return 0, err
	}
	return len(p), nil
}

// drain waits for the output to be free and writes pend (blocking).
func (k *tlsSink) drain() error {
	k.mu.Lock()
	for k.owned {
		k.cond.Wait()
	}
	if len(k.pend) == 0 || k.err != nil {
		err := k.err
		k.mu.Unlock()
		return err
	}
	k.owned = true
	k.mu.Unlock()
	return k.writeAll()
}

// writeAll writes pend with blocking writes and lets the output go (owner).
func (k *tlsSink) writeAll() error {
	k.mu.Lock()
	for len(k.pend) > 0 && k.err == nil {
		b := k.pend // appends made during the write land after b (or in a new array)
		k.mu.Unlock()
		n, err := k.Conn.Write(b)
		k.mu.Lock()
		if c := k.conn; c != nil {
			c.wrote(n)
			if err != nil && c.writeGoesOn(err) { // slow, within the minimum rate
				k.consumeLocked(n, nil)
				continue
			}
		}
		k.consumeLocked(len(b), err)
	}
	err := k.err
	k.releaseLocked()
	k.mu.Unlock()
	return err
}

// writeSome writes pend with non-blocking writes (owner). It lets the output go when pend
// is empty and release is set, or on an error (EAGAIN: the socket is full).
func (k *tlsSink) writeSome(release bool) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	for len(k.pend) > 0 {
		b := k.pend
		k.mu.Unlock()
		n, err := rawWrite(k.rc, b)
		k.mu.Lock()
		if err == nil && n < len(b) {
			err = unix.EAGAIN
		}
		if err == unix.EAGAIN {
			k.consumeLocked(n, nil)
			k.releaseLocked()
			return err
		}
		k.consumeLocked(n, err)
		if err != nil {
			k.releaseLocked()
			return err
		}
	}
	if release {
		k.releaseLocked()
	}
	return nil
}

// consumeLocked drops the first n bytes of pend, written; err: the socket failed.
func (k *tlsSink) consumeLocked(n int, err error) {
	switch {
	case err != nil:
		k.err, k.pend = err, nil
	case n >= len(k.pend):
		k.pend = k.pend[:0]
		if cap(k.pend) > tlsChunk*2 {
			k.pend = nil
		}
	default:
		m := copy(k.pend, k.pend[n:])
		k.pend = k.pend[:m]
	}
}

func (k *tlsSink) releaseLocked() {
	k.owned = false
	k.cond.Broadcast()
}

// CloseWrite shuts the TCP connection's write side (lingering close, HTTP/2's fatal GOAWAY).
func (k *tlsSink) CloseWrite() error {
	if cw, ok := k.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// shutWrite shuts c's write side (lingering close, HTTP/2's fatal GOAWAY); a TLS connection
// sends close_notify first (its records go out before the TCP connection's FIN).
func (c *Conn) shutWrite() {
	nc := c.nc
	if t, ok := nc.(*tlsConn); ok {
		t.Conn.CloseWrite() // close_notify (written like any record: the sink)
		nc = t.NetConn()
	}
	if cw, ok := nc.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
}

// drainTLS writes the records a flush left queued (the writer goroutine, before the rest
// of the output). An error: the connection failed.
func (c *Conn) drainTLS() error {
	if t, ok := c.nc.(*tlsConn); ok {
		return t.sink.drain()
	}
	return nil
}

// canBorrowLocked: a body part may be borrowed (not copied) for the length of its send,
// whose flush encrypts it at once: a TLS connection in HTTP/1.1 whose output is not being
// written by the writer goroutine, with no file queued (c.mu held).
func (c *Conn) canBorrowLocked() bool {
	_, ok := c.nc.(*tlsConn)
	// (no check for HTTP/2: over TLS, ALPN chose it before any HTTP/1.1 request)
	return ok && c.lp == nil && !c.writing && len(c.files) == 0
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

// ---- encrypted private keys (--ssl-keyfile-password) ----

// decryptKeyPEM returns the PEM blocks of b with an encrypted private key decrypted:
// PKCS#8 "ENCRYPTED PRIVATE KEY" (PBES2: PBKDF2 with HMAC-SHA1/SHA-2, AES-CBC or
// DES-EDE3-CBC: what OpenSSL 1.1+/3 and Python's cryptography write) and the legacy
// OpenSSL "Proc-Type: 4,ENCRYPTED" form.
func decryptKeyPEM(b []byte, password string) ([]byte, error) {
	var out []byte
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			break
		}
		switch {
		case blk.Type == "ENCRYPTED PRIVATE KEY":
			if password == "" {
				return nil, errors.New("the private key is encrypted: ssl_keyfile_password is needed")
			}
			der, err := decryptPKCS8(blk.Bytes, []byte(password))
			if err != nil {
				return nil, err
			}
			blk = &pem.Block{Type: "PRIVATE KEY", Bytes: der}
		case blk.Headers["Proc-Type"] == "4,ENCRYPTED":
			if password == "" {
				return nil, errors.New("the private key is encrypted: ssl_keyfile_password is needed")
			}
			//lint:ignore SA1019 the legacy format is insecure but still written by old tools
			der, err := x509.DecryptPEMBlock(blk, []byte(password)) //nolint:staticcheck
			if err != nil {
				return nil, fmt.Errorf("cannot decrypt the private key: %w", err)
			}
			blk = &pem.Block{Type: blk.Type, Bytes: der}
		}
		out = append(out, pem.EncodeToMemory(blk)...)
	}
	return out, nil
}

var (
	oidPBES2      = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 5, 13}
	oidPBKDF2     = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 5, 12}
	oidHMACSHA1   = asn1.ObjectIdentifier{1, 2, 840, 113549, 2, 7}
	oidHMACSHA224 = asn1.ObjectIdentifier{1, 2, 840, 113549, 2, 8}
	oidHMACSHA256 = asn1.ObjectIdentifier{1, 2, 840, 113549, 2, 9}
	oidHMACSHA384 = asn1.ObjectIdentifier{1, 2, 840, 113549, 2, 10}
	oidHMACSHA512 = asn1.ObjectIdentifier{1, 2, 840, 113549, 2, 11}
	oidAES128CBC  = asn1.ObjectIdentifier{2, 16, 840, 1, 101, 3, 4, 1, 2}
	oidAES192CBC  = asn1.ObjectIdentifier{2, 16, 840, 1, 101, 3, 4, 1, 22}
	oidAES256CBC  = asn1.ObjectIdentifier{2, 16, 840, 1, 101, 3, 4, 1, 42}
	oidDESEDE3CBC = asn1.ObjectIdentifier{1, 2, 840, 113549, 3, 7}
)

type encryptedPKI struct {
	Algo pkix.AlgorithmIdentifier
	Data []byte
}

type pbes2Params struct {
	KDF pkix.AlgorithmIdentifier
	Enc pkix.AlgorithmIdentifier
}

type pbkdf2Params struct {
	Salt       []byte
	Iterations int
	KeyLength  int                      `asn1:"optional"`
	PRF        pkix.AlgorithmIdentifier `asn1:"optional"`
}

func decryptPKCS8(der, password []byte) ([]byte, error) {
	var epki encryptedPKI
	if _, err := asn1.Unmarshal(der, &epki); err != nil {
		return nil, fmt.Errorf("bad encrypted private key: %w", err)
	}
	if !epki.Algo.Algorithm.Equal(oidPBES2) {
		return nil, fmt.Errorf("unsupported private key encryption %v (PBES2 is)", epki.Algo.Algorithm)
	}
	var p pbes2Params
	if _, err := asn1.Unmarshal(epki.Algo.Parameters.FullBytes, &p); err != nil {
		return nil, fmt.Errorf("bad PBES2 parameters: %w", err)
	}
	if !p.KDF.Algorithm.Equal(oidPBKDF2) {
		return nil, fmt.Errorf("unsupported key derivation %v (PBKDF2 is)", p.KDF.Algorithm)
	}
	var kp pbkdf2Params
	if _, err := asn1.Unmarshal(p.KDF.Parameters.FullBytes, &kp); err != nil {
		return nil, fmt.Errorf("bad PBKDF2 parameters: %w", err)
	}
	var h func() hash.Hash
	switch {
	case len(kp.PRF.Algorithm) == 0 || kp.PRF.Algorithm.Equal(oidHMACSHA1):
		h = sha1.New
	case kp.PRF.Algorithm.Equal(oidHMACSHA224):
		h = sha256.New224
	case kp.PRF.Algorithm.Equal(oidHMACSHA256):
		h = sha256.New
	case kp.PRF.Algorithm.Equal(oidHMACSHA384):
		h = sha512.New384
	case kp.PRF.Algorithm.Equal(oidHMACSHA512):
		h = sha512.New
	default:
		return nil, fmt.Errorf("unsupported PBKDF2 PRF %v", kp.PRF.Algorithm)
	}
	var keyLen int
	var newCipher func([]byte) (cipher.Block, error)
	switch {
	case p.Enc.Algorithm.Equal(oidAES128CBC):
		keyLen, newCipher = 16, aes.NewCipher
	case p.Enc.Algorithm.Equal(oidAES192CBC):
		keyLen, newCipher = 24, aes.NewCipher
	case p.Enc.Algorithm.Equal(oidAES256CBC):
		keyLen, newCipher = 32, aes.NewCipher
	case p.Enc.Algorithm.Equal(oidDESEDE3CBC):
		keyLen, newCipher = 24, des.NewTripleDESCipher
	default:
		return nil, fmt.Errorf("unsupported private key cipher %v", p.Enc.Algorithm)
	}
	var iv []byte
	if _, err := asn1.Unmarshal(p.Enc.Parameters.FullBytes, &iv); err != nil {
		return nil, fmt.Errorf("bad cipher parameters: %w", err)
	}
	if kp.Iterations <= 0 || kp.Iterations > 10_000_000 {
		return nil, errors.New("bad PBKDF2 iteration count")
	}
	key, err := pbkdf2.Key(h, string(password), kp.Salt, kp.Iterations, keyLen)
	if err != nil {
		return nil, err
	}
	blk, err := newCipher(key)
	if err != nil {
		return nil, err
	}
	data := epki.Data
	if len(iv) != blk.BlockSize() || len(data) == 0 || len(data)%blk.BlockSize() != 0 {
		return nil, errors.New("bad encrypted private key")
	}
	plain := make([]byte, len(data))
	cipher.NewCBCDecrypter(blk, iv).CryptBlocks(plain, data)
	pad := int(plain[len(plain)-1])
	if pad == 0 || pad > blk.BlockSize() {
		return nil, errors.New("cannot decrypt the private key: wrong password?")
	}
	for _, x := range plain[len(plain)-pad:] {
		if int(x) != pad {
			return nil, errors.New("cannot decrypt the private key: wrong password?")
		}
	}
	plain = plain[:len(plain)-pad]
	if _, err := x509.ParsePKCS8PrivateKey(plain); err != nil {
		return nil, errors.New("cannot decrypt the private key: wrong password?")
	}
	return plain, nil
}
