// Package testpki writes a throw-away CA and certificates for tests that
// run etcd over TLS.
package testpki

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
	"testing"
	"time"
)

// PKI is a throw-away CA with one server and one client certificate,
// written as PEM files for etcd and the datastore client to load.
type PKI struct {
	CAFile, ServerCert, ServerKey, ClientCert, ClientKey string

	dir   string
	caKey *ecdsa.PrivateKey
	ca    *x509.Certificate
}

// IssueClient writes a client certificate with common name cn (the etcd
// user when etcd runs with --client-cert-auth and auth enabled).
func (p PKI) IssueClient(t testing.TB, cn string) (certFile, keyFile string) {
	t.Helper()
	return issueCert(t, p.dir, cn, p.caKey, p.ca, &x509.Certificate{
		Subject:     pkix.Name{CommonName: cn},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
}

// New writes a CA, a server certificate for 127.0.0.1/localhost and a
// client certificate into a fresh temp dir.
func New(t testing.TB) PKI {
	t.Helper()
	dir := t.TempDir()
	caKey, caCert := newCA(t)
	p := PKI{CAFile: filepath.Join(dir, "ca.pem"), dir: dir, caKey: caKey, ca: caCert}
	writePEM(t, p.CAFile, "CERTIFICATE", caCert.Raw)

	p.ServerCert, p.ServerKey = issueCert(t, dir, "server", caKey, caCert, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "etcd"},
		DNSNames:    []string{"localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	p.ClientCert, p.ClientKey = issueCert(t, dir, "client", caKey, caCert, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "routed"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	return p
}

func newCA(t testing.TB) (*ecdsa.PrivateKey, *x509.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "routed test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return key, cert
}

// issueCert signs tmpl with the CA and writes <name>.pem and <name>-key.pem.
func issueCert(t testing.TB, dir, name string, caKey *ecdsa.PrivateKey, ca *x509.Certificate, tmpl *x509.Certificate) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sn, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl.SerialNumber = sn
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(24 * time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile = filepath.Join(dir, name+".pem")
	keyFile = filepath.Join(dir, name+"-key.pem")
	writePEM(t, certFile, "CERTIFICATE", der)
	writePEM(t, keyFile, "PRIVATE KEY", keyDER)
	return certFile, keyFile
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
