package felix_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/routed-net/routed/felix/internal/nstest"
)

// TestWireguardHostEncryptionKeyRotation: node-a rotates its key with
// host encryption on. Its host traffic to node-b goes in clear (never
// held) until node-b has the new key and a handshake under it
// succeeded, then is encrypted again; a host connection opened before
// the rotation keeps working throughout.
func TestWireguardHostEncryptionKeyRotation(t *testing.T) {
	l := newWGLab(t, nil)
	a, b := l.nodes["node-a"], l.nodes["node-b"]
	for _, n := range []*wgNode{a, b} {
		n.f.SetWireguardHostEncryption(true)
	}
	waitHostEncrypted(t, a, "node-b", true)
	waitHostEncrypted(t, b, "node-a", true)
	srv := listenHost(t, b, 7780)
	session := dialHost(t, a, "192.0.2.2:7780")
	defer session.Close()
	if err := exchange(session, 1); err != nil {
		t.Fatal(err)
	}
	<-srv.peers

	began := time.Now()
	if _, err := a.f.RotateWireguardKeys(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := exchange(session, 3); err != nil {
		t.Errorf("the host connection broke at the rotation: %v", err)
	}
	waitHostEncrypted(t, a, "node-b", true)
	waitHostEncrypted(t, b, "node-a", true)
	t.Logf("after the rotation host traffic is encrypted both ways again %v later", time.Since(began).Round(time.Millisecond))
	stop := capture(t, a, "192.0.2.2")
	if err := exchange(session, 3); err != nil {
		t.Errorf("the host connection broke after the rotation: %v", err)
	}
	hostTalk(t, a, srv, "192.0.2.2:7780")
	if pcap := stop(); bytes.Contains(pcap, []byte(hostSecret)) {
		t.Error("host payload in clear after the rotation settled")
	}
}

// TestWireguardHostEncryptionFelixConfiguration: FelixConfiguration's
// wireguardHostEncryptionEnabled turns host encryption on over routed's
// flag (off here), live, and removing it brings the flag's setting
// back: the rule goes.
func TestWireguardHostEncryptionFelixConfiguration(t *testing.T) {
	l := newWGLab(t, nil)
	a, b := l.nodes["node-a"], l.nodes["node-b"]
	on := true
	for _, n := range []*wgNode{a, b} {
		n.f.SetWireguardHostOverride(&on)
	}
	waitHostEncrypted(t, a, "node-b", true)
	waitHostEncrypted(t, b, "node-a", true)
	for _, n := range []*wgNode{a, b} {
		n.f.SetWireguardHostOverride(nil)
	}
	nstest.Eventually(t, 10*time.Second, func() string {
		st, err := a.f.Wireguard(context.Background())
		if r := hostRule(t, a); err != nil || st.HostEncryption || strings.TrimSpace(r) != "" {
			return fmt.Sprintf("override removed: host encryption %v, rule %q (%v)", st.HostEncryption, r, err)
		}
		return ""
	})
}
