// Package testpki writes a throw-away CA and certificates for tests (and
// the k8s demo) that run etcd over TLS.
package testpki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
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
	certFile, keyFile, err := issueCert(p.dir, cn, p.caKey, p.ca, &x509.Certificate{
		Subject:     pkix.Name{CommonName: cn},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	if err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// IssuePeer writes <name>.pem and <name>-key.pem: a certificate for an
// etcd member's peer port at ips, usable as server and as client (a member
// dials its peers with the same certificate it serves with).
func (p PKI) IssuePeer(name string, ips ...net.IP) (certFile, keyFile string, err error) {
	return issueCert(p.dir, name, p.caKey, p.ca, &x509.Certificate{
		Subject:     pkix.Name{CommonName: name},
		IPAddresses: ips,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	})
}

// New writes a CA, a server certificate for 127.0.0.1/localhost and a
// client certificate into a fresh temp dir.
func New(t testing.TB) PKI {
	t.Helper()
	p, err := Write(t.TempDir(), net.IPv4(127, 0, 0, 1))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Write writes a CA, a server certificate for localhost and serverIPs,
// and a client certificate (CN routed) into dir.
func Write(dir string, serverIPs ...net.IP) (PKI, error) {
	caKey, caCert, err := newCA()
	if err != nil {
		return PKI{}, err
	}
	p := PKI{CAFile: filepath.Join(dir, "ca.pem"), dir: dir, caKey: caKey, ca: caCert}
	if err := writePEM(p.CAFile, "CERTIFICATE", caCert.Raw); err != nil {
		return PKI{}, err
	}
	p.ServerCert, p.ServerKey, err = issueCert(dir, "server", caKey, caCert, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "etcd"},
		DNSNames:    []string{"localhost"},
		IPAddresses: serverIPs,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	if err != nil {
		return PKI{}, err
	}
	p.ClientCert, p.ClientKey, err = issueCert(dir, "client", caKey, caCert, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "routed"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	if err != nil {
		return PKI{}, err
	}
	return p, nil
}

func newCA() (*ecdsa.PrivateKey, *x509.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
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
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	return key, cert, err
}

// issueCert signs tmpl with the CA and writes <name>.pem and <name>-key.pem.
func issueCert(dir, name string, caKey *ecdsa.PrivateKey, ca *x509.Certificate, tmpl *x509.Certificate) (certFile, keyFile string, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", err
	}
	sn, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		return "", "", err
	}
	tmpl.SerialNumber = sn
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(24 * time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return "", "", fmt.Errorf("issue %s: %w", name, err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return "", "", err
	}
	certFile = filepath.Join(dir, name+".pem")
	keyFile = filepath.Join(dir, name+"-key.pem")
	if err := writePEM(certFile, "CERTIFICATE", der); err != nil {
		return "", "", err
	}
	return certFile, keyFile, writePEM(keyFile, "PRIVATE KEY", keyDER)
}

func writePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}
