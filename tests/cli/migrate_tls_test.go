package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"

	"github.com/routed-net/routed/internal/testpki"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/pkg/etcdserver"
)

// TestMigrateCalicoOverTLS: Calico's etcd serves only TLS and requires a
// client certificate, as Calico's etcd usually does. With the
// --from-etcd-* certificate flags the migration reads it; without a
// client certificate it fails within the request timeout (it hung
// before), naming Calico's etcd and the missing certificate, and writes
// nothing.
func TestMigrateCalicoOverTLS(t *testing.T) {
	t.Parallel()
	pki := testpki.New(t)
	calico, err := etcdserver.Start(context.Background(), etcdserver.Config{
		Dir: t.TempDir(), ClientAddr: "127.0.0.1:0", PeerAddr: "127.0.0.1:0", NoFsync: true,
		TLS: transport.TLSInfo{CertFile: pki.ServerCert, KeyFile: pki.ServerKey, TrustedCAFile: pki.CAFile, ClientCertAuth: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(calico.Close)
	src := calico.Endpoints[0]
	c, err := datastore.New(datastore.Config{Endpoints: []string{src}, CACertFile: pki.CAFile, CertFile: pki.ClientCert, KeyFile: pki.ClientKey})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := c.Etcd().Put(ctx, "/calico/resources/v3/projectcalico.org/bgppeers/rack1-tor",
		`{"kind":"BGPPeer","apiVersion":"projectcalico.org/v3","metadata":{"name":"rack1-tor"},"spec":{"peerIP":"10.0.0.1","asNumber":64567}}`); err != nil {
		t.Fatal(err)
	}
	ep := startEtcd(t) // routed's own, plain

	out, errOut, code := ctl(t, ep, "", "migrate", "calico", "--from-etcd", src, "--from-etcd-ca-cert-file", pki.CAFile)
	if code != 1 || !strings.Contains(errOut, "reading Calico's") || !strings.Contains(errOut, "certificate required") {
		t.Fatalf("without a client certificate: code %d\n%s%s", code, out, errOut)
	}
	t.Logf("refused without a client certificate: %s", strings.TrimSpace(errOut))
	if _, errOut, code := ctl(t, ep, "", "get", "bgppeer", "rack1-tor"); code == 0 || !strings.Contains(errOut, "not found") {
		t.Fatalf("a refused migration wrote the peer: %d %s", code, errOut)
	}

	out, errOut, code = ctl(t, ep, "", "migrate", "calico", "--from-etcd", src,
		"--from-etcd-ca-cert-file", pki.CAFile, "--from-etcd-cert-file", pki.ClientCert, "--from-etcd-key-file", pki.ClientKey)
	if code != 0 || !strings.Contains(out, "Migrated: 1 to create") {
		t.Fatalf("over TLS: code %d\n%s%s", code, out, errOut)
	}
	if out, errOut, code := ctl(t, ep, "", "get", "bgppeer", "rack1-tor", "-o", "yaml"); code != 0 || !strings.Contains(out, "asNumber: 64567") {
		t.Fatalf("peer after the migration: %d\n%s%s", code, out, errOut)
	}
}
