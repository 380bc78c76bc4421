package httpserver

// keydecrypt.go: encrypted private keys (--ssl-keyfile-password), which crypto/tls does not
// read: PKCS#8 "ENCRYPTED PRIVATE KEY" (PBES2) decrypted here, and the legacy OpenSSL PEM
// form through crypto/x509. loadCert (tls.go) calls decryptKeyPEM.

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/des"
	"crypto/pbkdf2"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"errors"
	"fmt"
	"hash"
)

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
