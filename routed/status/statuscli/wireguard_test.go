package statuscli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/routed-net/routed/routed/status"
)

// TestWireguardHostSection: node status says whether host encryption
// is on, to which nodes host traffic is encrypted and, for the others,
// why it goes in clear; off, it says so.
func TestWireguardHostSection(t *testing.T) {
	var out bytes.Buffer
	hostSection(&out, &status.Wireguard{Enabled: true})
	if got := out.String(); !strings.Contains(got, "Host encryption: off") {
		t.Errorf("off:\n%s", got)
	}
	out.Reset()
	hostSection(&out, &status.Wireguard{Enabled: true, HostEncryption: true, HostPeers: []status.WireguardHost{
		{Node: "n2", Device: "wg.routed", Encrypted: true},
		{Node: "n3", Device: "wg.routed", Encrypted: true},
		{Node: "n5", Device: "wg.routed", Reason: "it has published no WireGuard key"},
	}, HostWarnings: []string{"host encryption refused for IPv4: net.ipv4.conf.all.arp_filter=1"}})
	got := out.String()
	for _, want := range []string{"Host encryption: on.", "Host traffic encrypted to: n2 (wg.routed), n3 (wg.routed)",
		"CLEAR: host traffic to n5 (wg.routed): it has published no WireGuard key",
		"WARNING: host encryption refused for IPv4: net.ipv4.conf.all.arp_filter=1"} {
		if !strings.Contains(got, want) {
			t.Errorf("on: output lacks %q:\n%s", want, got)
		}
	}
}
