package httpserver

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// testKey is a fresh EC key and its PKCS#8 DER.
func testKey(t *testing.T) []byte {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

// pbes2PEM encrypts der as PKCS#8 PBES2 (PBKDF2 with HMAC-SHA256, AES-256-CBC), as
// OpenSSL 3 writes it by default; enc replaces the cipher's OID when set.
func pbes2PEM(t *testing.T, der []byte, password string, enc asn1.ObjectIdentifier) []byte {
	t.Helper()
	salt, iv := make([]byte, 16), make([]byte, aes.BlockSize)
	rand.Read(salt)
	rand.Read(iv)
	key, err := pbkdf2.Key(sha256.New, password, salt, 2048, 32)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := aes.NewCipher(key)
	pad := aes.BlockSize - len(der)%aes.BlockSize
	data := append(append([]byte{}, der...), bytes.Repeat([]byte{byte(pad)}, pad)...)
	cipher.NewCBCEncrypter(blk, iv).CryptBlocks(data, data)
	if enc == nil {
		enc = oidAES256CBC
	}
	kdf := pbkdf2Params{Salt: salt, Iterations: 2048, KeyLength: 32,
		PRF: pkix.AlgorithmIdentifier{Algorithm: oidHMACSHA256, Parameters: asn1.NullRawValue}}
	params := pbes2Params{
		KDF: pkix.AlgorithmIdentifier{Algorithm: oidPBKDF2, Parameters: asn1.RawValue{FullBytes: mustMarshal(t, kdf)}},
		Enc: pkix.AlgorithmIdentifier{Algorithm: enc, Parameters: asn1.RawValue{FullBytes: mustMarshal(t, iv)}},
	}
	epki := encryptedPKI{
		Algo: pkix.AlgorithmIdentifier{Algorithm: oidPBES2, Parameters: asn1.RawValue{FullBytes: mustMarshal(t, params)}},
		Data: data,
	}
	return pem.EncodeToMemory(&pem.Block{Type: "ENCRYPTED PRIVATE KEY", Bytes: mustMarshal(t, epki)})
}

// decryptedKey is the DER of the one PRIVATE KEY block of decryptKeyPEM's output.
func decryptedKey(t *testing.T, in []byte, password string) []byte {
	t.Helper()
	out, err := decryptKeyPEM(in, password)
	if err != nil {
		t.Fatal(err)
	}
	blk, rest := pem.Decode(out)
	if blk == nil || len(bytes.TrimSpace(rest)) != 0 {
		t.Fatalf("want one PEM block, got %q", out)
	}
	return blk.Bytes
}

func TestDecryptPKCS8PBES2(t *testing.T) {
	der := testKey(t)
	got := decryptedKey(t, pbes2PEM(t, der, "s3cret", nil), "s3cret")
	if !bytes.Equal(got, der) {
		t.Fatal("decrypted key differs from the original")
	}
}

func TestDecryptLegacyPEM(t *testing.T) {
	der := testKey(t)
	//lint:ignore SA1019 the legacy format is what the decryptor must read
	blk, err := x509.EncryptPEMBlock(rand.Reader, "PRIVATE KEY", der, []byte("s3cret"), x509.PEMCipherAES128) //nolint:staticcheck
	if err != nil {
		t.Fatal(err)
	}
	got := decryptedKey(t, pem.EncodeToMemory(blk), "s3cret")
	if !bytes.Equal(got, der) {
		t.Fatal("decrypted key differs from the original")
	}
	wrongPassword(t, pem.EncodeToMemory(blk), der)
}

// The keys OpenSSL writes: PBES2 with each cipher and PRF the decryptor reads, and the
// legacy form of `openssl ec -aes256` (skipped without the openssl command).
func TestDecryptOpenSSLKeys(t *testing.T) {
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Skip("no openssl command")
	}
	dir := t.TempDir()
	plain := filepath.Join(dir, "key.pem")
	if out, err := exec.Command("openssl", "ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", plain).CombinedOutput(); err != nil {
		t.Fatalf("openssl ecparam: %v\n%s", err, out)
	}
	out, err := exec.Command("openssl", "pkcs8", "-topk8", "-nocrypt", "-in", plain).Output()
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(out)
	want := blk.Bytes
	cases := map[string][]string{
		"aes-256-cbc sha256": {"pkcs8", "-topk8", "-v2", "aes-256-cbc", "-v2prf", "hmacWithSHA256"},
		"aes-128-cbc sha1":   {"pkcs8", "-topk8", "-v2", "aes-128-cbc", "-v2prf", "hmacWithSHA1"},
		"aes-192-cbc sha512": {"pkcs8", "-topk8", "-v2", "aes-192-cbc", "-v2prf", "hmacWithSHA512"},
		"des3 sha384":        {"pkcs8", "-topk8", "-v2", "des3", "-v2prf", "hmacWithSHA384"},
		"legacy aes256":      {"ec", "-aes256"},
	}
	for name, args := range cases {
		t.Run(name, func(t *testing.T) {
			args := append(args, "-in", plain, "-passout", "pass:s3cret")
			enc, err := exec.Command("openssl", args...).Output()
			if err != nil {
				t.Fatalf("openssl %s: %v", strings.Join(args, " "), err)
			}
			got := decryptedKey(t, enc, "s3cret")
			if name == "legacy aes256" { // its plaintext is SEC 1 (EC PRIVATE KEY), not PKCS#8
				k, err := x509.ParseECPrivateKey(got)
				if err != nil {
					t.Fatal(err)
				}
				if got, _ = x509.MarshalPKCS8PrivateKey(k); got == nil {
					t.Fatal("cannot re-encode the key")
				}
			}
			if !bytes.Equal(got, want) {
				t.Fatal("decrypted key differs from openssl's plain one")
			}
			wrongPassword(t, enc, got)
		})
	}
}

func TestDecryptKeyErrors(t *testing.T) {
	der := testKey(t)
	enc := pbes2PEM(t, der, "s3cret", nil)
	cases := []struct {
		name, password, want string
		in                   []byte
	}{
		{"wrong password", "wrong", "wrong password", enc},
		{"no password", "", "ssl_keyfile_password is needed", enc},
		{"unsupported cipher", "s3cret", "unsupported private key cipher",
			pbes2PEM(t, der, "s3cret", asn1.ObjectIdentifier{1, 2, 840, 113549, 3, 2})}, // RC2-CBC
		{"not PBES2", "s3cret", "unsupported private key encryption", pem.EncodeToMemory(&pem.Block{
			Type: "ENCRYPTED PRIVATE KEY", Bytes: mustMarshal(t, encryptedPKI{
				Algo: pkix.AlgorithmIdentifier{Algorithm: asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 12, 1, 3}}, // PBES1
				Data: []byte{1, 2, 3}})})},
		{"not DER", "s3cret", "bad encrypted private key",
			pem.EncodeToMemory(&pem.Block{Type: "ENCRYPTED PRIVATE KEY", Bytes: []byte("junk")})},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := decryptKeyPEM(c.in, c.password)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want one saying %q", err, c.want)
			}
		})
	}
}

// Blocks that are not encrypted keys (the certificate chain, a plain key) pass unchanged.
func TestDecryptKeyPEMKeepsOtherBlocks(t *testing.T) {
	der := testKey(t)
	cert := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte{0x30, 0}})
	plainKey := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
	in := append(append([]byte{}, cert...), pbes2PEM(t, der, "pw", nil)...)
	out, err := decryptKeyPEM(in, "pw")
	if err != nil {
		t.Fatal(err)
	}
	if want := append(append([]byte{}, cert...), plainKey...); !bytes.Equal(out, want) {
		t.Fatalf("got %q, want %q", out, want)
	}
	if out, err := decryptKeyPEM(plainKey, ""); err != nil || !bytes.Equal(out, plainKey) {
		t.Fatalf("a plain key: %q, %v", out, err)
	}
}

// wrongPassword: a wrong password never yields the key (the legacy form has no check of its
// own: about one wrong password in 256 passes its padding check and gives garbage, which
// loading the key then refuses; PKCS#8 keys are parsed after decryption, so it always fails).
func wrongPassword(t *testing.T, enc, key []byte) {
	t.Helper()
	out, err := decryptKeyPEM(enc, "wrong")
	if err == nil && bytes.Contains(out, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: key})) {
		t.Fatal("a wrong password decrypted the key")
	}
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := asn1.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
