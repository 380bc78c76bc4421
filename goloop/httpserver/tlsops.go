package httpserver

// tlsops.go: the operator's TLS controls beyond the certificate files: the lowest TLS
// version accepted (`--ssl-protocol-min`) and a certificate revocation list checked against
// client certificates (`--ssl-crl`). Set before SetTLS; loadTLS applies them to every load,
// so a reload (SIGHUP) reads the CRL file again.

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
)

// TLSExtra are the TLS controls of SetTLSExtra.
type TLSExtra struct {
	MinVersion uint16 // tls.VersionTLS12 (0: that) or tls.VersionTLS13
	CRLFile    string // PEM or DER; "" none
}

// SetTLSExtra sets the TLS controls (before SetTLS).
func (s *Server) SetTLSExtra(x TLSExtra) error {
	switch x.MinVersion {
	case 0, tls.VersionTLS12, tls.VersionTLS13:
	default:
		return fmt.Errorf("the lowest TLS version must be 1.2 or 1.3, not %#x", x.MinVersion)
	}
	s.tlsExtra = x
	return nil
}

// applyTLSExtra sets cfg's lowest version and, with a CRL, the check of the client's
// verified chains against it (the CRL's signature is verified with the client CAs, caPEM).
func (x TLSExtra) apply(cfg *tls.Config, caPEM []byte) error {
	if x.MinVersion != 0 {
		cfg.MinVersion = x.MinVersion
	}
	if x.CRLFile == "" {
		return nil
	}
	crl, err := loadCRL(x.CRLFile, caPEM)
	if err != nil {
		return err
	}
	cfg.VerifyPeerCertificate = crl.check
	return nil
}

type revocations struct {
	issuer  []byte              // the CRL's issuer (raw subject)
	serials map[string]struct{} // revoked serial numbers (big.Int text)
}

func loadCRL(path string, caPEM []byte) (*revocations, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	der := data
	if b, _ := pem.Decode(data); b != nil {
		if b.Type != "X509 CRL" {
			return nil, fmt.Errorf("%s: a PEM %q block, not an X509 CRL", path, b.Type)
		}
		der = b.Bytes
	}
	rl, err := x509.ParseRevocationList(der)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	// its issuer must be one of the client CAs, and have signed it
	signed := false
	for rest := caPEM; len(rest) > 0; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		ca, err := x509.ParseCertificate(b.Bytes)
		if err == nil && bytes.Equal(ca.RawSubject, rl.RawIssuer) && rl.CheckSignatureFrom(ca) == nil {
			signed = true
			break
		}
	}
	if !signed {
		return nil, fmt.Errorf("%s: not signed by a CA of ssl_ca_certs", path)
	}
	r := &revocations{issuer: rl.RawIssuer, serials: map[string]struct{}{}}
	for _, e := range rl.RevokedCertificateEntries {
		r.serials[e.SerialNumber.Text(16)] = struct{}{}
	}
	return r, nil
}

var errRevoked = errors.New("tls: the client certificate is revoked")

// check is the tls.Config's VerifyPeerCertificate: a certificate of a verified chain issued
// by the CRL's issuer and listed in it fails the handshake.
func (r *revocations) check(_ [][]byte, chains [][]*x509.Certificate) error {
	for _, chain := range chains {
		for _, c := range chain {
			if bytes.Equal(c.RawIssuer, r.issuer) && r.revoked(c.SerialNumber) {
				return errRevoked
			}
		}
	}
	return nil
}

func (r *revocations) revoked(n *big.Int) bool {
	_, ok := r.serials[n.Text(16)]
	return ok
}
