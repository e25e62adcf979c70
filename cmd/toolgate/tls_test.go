package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeSelfSigned writes a certificate for 127.0.0.1 and its key.
func writeSelfSigned(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "toolgate test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

func TestServeTLS(t *testing.T) {
	t.Parallel()
	dir := tourDir(t)
	cert, key := writeSelfSigned(t, dir)
	cfg := "tls:\n  cert_file: " + cert + "\n  key_file: " + key + "\n"
	if err := os.WriteFile(filepath.Join(dir, "tls.yaml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := startServer(t, dir, "--config", "tls.yaml")

	out, stderr, code := runTool(t, dir, "call", "--addr", srv.addr, "--ca-file", cert,
		"--request-id", "tls-1", "--tool", "workspace.readFile", "--args", `{"path":"none.txt"}`)
	if code != exitFailure || !strings.Contains(out, `"decision": "allow"`) {
		t.Fatalf("call over TLS: exit %d\n%s%s", code, out, stderr)
	}
	_, stderr, code = runTool(t, dir, "call", "--addr", srv.addr, "--timeout", "3s",
		"--request-id", "tls-2", "--tool", "workspace.readFile")
	if code != exitError || !strings.Contains(stderr, "Unavailable") {
		t.Fatalf("plaintext call to a TLS gateway: exit %d\n%s", code, stderr)
	}
}
