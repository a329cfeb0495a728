package felix

import (
	"net/netip"
	"slices"
	"testing"
)

// TestOnLinkDevices: the ARP settings are read on the uplink and on
// every interface whose subnet holds a peer (a peer reached on a second
// interface sends its ARP there), never on lo or the WireGuard devices,
// and not on an interface whose subnets hold no peer (peers behind a
// router never ARP for this node).
func TestOnLinkDevices(t *testing.T) {
	sn := func(dev, p string) ifSubnet { return ifSubnet{dev: dev, net: netip.MustParsePrefix(p)} }
	subnets := []ifSubnet{
		sn("eth0", "192.0.2.0/24"), sn("eth1", "198.51.100.0/24"), sn("eth2", "203.0.113.0/24"),
		sn("lo", "127.0.0.0/8"), sn("wg.routed", "0.0.0.0/0"), sn("eth1", "198.51.101.0/24"),
	}
	peers := []netip.Addr{netip.MustParseAddr("192.0.2.2"), netip.MustParseAddr("198.51.101.7"),
		netip.MustParseAddr("10.9.9.9"), netip.MustParseAddr("127.0.0.1")}
	for _, c := range []struct {
		uplink string
		want   []string
	}{
		{"eth0", []string{"eth0", "eth1"}},
		{"eth2", []string{"eth0", "eth1", "eth2"}},
		{"", []string{"eth0", "eth1"}},
	} {
		if got := onLinkDevices(c.uplink, subnets, peers); !slices.Equal(got, c.want) {
			t.Errorf("uplink %q: %v, want %v", c.uplink, got, c.want)
		}
	}
	if got := onLinkDevices("", subnets, nil); len(got) != 0 {
		t.Errorf("no peers, no uplink: %v, want none", got)
	}
}
