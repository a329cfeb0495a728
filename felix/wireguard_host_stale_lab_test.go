package felix_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/routed-net/routed/felix"
	"github.com/routed-net/routed/felix/internal/nstest"
	"github.com/routed-net/routed/pkg/api"
)

// TestWireguardHostEncryptionStaleRecord: a second Node record claiming
// node-b's address (a stale record of a node whose address node-b took,
// or a forged one) with a key of its own, seen by both nodes. Neither
// peer gets the address: host traffic between node-a and node-b goes
// in clear both ways (never held, the status says why; node-b, whose
// address no peer of node-a's takes, sends its own in clear too)
// instead of to whichever peer the device wrote last; node-b's pods
// stay reachable through node-b's peer, encrypted; once the record
// goes, host traffic is encrypted again.
func TestWireguardHostEncryptionStaleRecord(t *testing.T) {
	l := newWGLab(t, nil)
	a, b := l.nodes["node-a"], l.nodes["node-b"]
	l.waitPing(a, b.pod, 20*time.Second)
	srv := listenHost(t, b, 7779)
	setHostEncryption(true, a, b)
	waitHostEncryptedBoth(t, a, b)

	k, err := wgtypes.GeneratePrivateKey()
	if err != nil {
		t.Fatal(err)
	}
	stale := node("node-b-old", "192.0.2.2/24", "")
	stale.Status.WireguardPublicKey = k.PublicKey().String()
	a.f.SetResource(stale)
	b.f.SetResource(stale)
	// The status names one of the two records for the address.
	var st felix.WireguardStatus
	nstest.Eventually(t, 60*time.Second, func() string {
		var err error
		if st, err = a.f.Wireguard(context.Background()); err != nil {
			return err.Error()
		}
		for _, h := range st.HostPeers {
			if !h.Encrypted && strings.Contains(h.Reason, "nodes node-b and node-b-old at once") {
				return ""
			}
		}
		return fmt.Sprintf("host peers %+v, want 192.0.2.2 in clear for being both records'", st.HostPeers)
	})
	if len(st.Held) != 0 {
		t.Errorf("status held %+v, want none", st.Held)
	}
	if r := hostTable(t, a); strings.Contains(r, "192.0.2.2") {
		t.Errorf("table 82 still routes node-b's shared address: %q", r)
	}
	pcap, sent, got := hostAndPodTraffic(t, l, a, b, srv, "192.0.2.2:7779")
	if !bytes.Contains(pcap, []byte(hostSecret)) {
		t.Errorf("host traffic to node-b with its address shared should go in clear:\n%s", dumpPcap(t, pcap))
	}
	if got == 0 || bytes.Contains(pcap, []byte(secret)) {
		t.Errorf("pod traffic to node-b with its address shared: %d of %d answered, payload on the wire %v; want encrypted and answered",
			got, sent, bytes.Contains(pcap, []byte(secret)))
	}

	a.f.DeleteResource(api.KindNode, "node-b-old")
	b.f.DeleteResource(api.KindNode, "node-b-old")
	waitHostEncryptedBoth(t, a, b)
}

// hostAndPodTraffic sends host traffic from a to srv at to and pings
// b's pod from a's, capturing what a sends to b on the wire.
func hostAndPodTraffic(t *testing.T, l *wgLab, a, b *wgNode, srv *hostServer, to string) (pcap []byte, sent, got int) {
	t.Helper()
	stop := capture(t, a, "192.0.2.2")
	hostTalk(t, a, srv, to)
	sent, got = l.ping(a, b.pod, 5, "0.05", "1", secretHex)
	return stop(), sent, got
}
