package autodetect

import (
	"net/netip"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/routed-net/routed/internal/testenv"
)

// TestDetectAddress6 autodetects in a namespace of its own holding a
// link-local, a deprecated and a usable IPv6 address next to IPv4 ones:
// first-found, interface= and can-reach= find the usable one with its
// prefix, and IPv4 detection is unchanged.
func TestAddress6(t *testing.T) {
	testenv.RequireRoot(t, "creates a network namespace")
	t.Parallel()
	nsh, err := testutils.NewNS()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nsh.Close(); _ = testutils.UnmountNS(nsh) })
	err = nsh.Do(func(ns.NetNS) error {
		la := netlink.NewLinkAttrs()
		la.Name = "eth7"
		if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: "peer7"}); err != nil {
			return err
		}
		l, err := netlink.LinkByName("eth7")
		if err != nil {
			return err
		}
		for _, a := range []struct {
			cidr  string
			flags int
		}{
			{"10.7.0.5/24", 0},
			{"fe80::7/64", unix.IFA_F_NODAD},
			{"fd00:7:1::9/64", unix.IFA_F_NODAD | unix.IFA_F_DEPRECATED},
			{"fd00:7::5/64", unix.IFA_F_NODAD},
		} {
			ipn, err := netlink.ParseIPNet(a.cidr)
			if err != nil {
				return err
			}
			addr := &netlink.Addr{IPNet: ipn, Flags: a.flags}
			if a.flags&unix.IFA_F_DEPRECATED != 0 {
				addr.PreferedLft = 0
				addr.ValidLft = 3600
			}
			if err := netlink.AddrAdd(l, addr); err != nil {
				return err
			}
		}
		for _, name := range []string{"eth7", "peer7"} {
			pl, err := netlink.LinkByName(name)
			if err != nil {
				return err
			}
			if err := netlink.LinkSetUp(pl); err != nil {
				return err
			}
		}
		want6, want4 := netip.MustParsePrefix("fd00:7::5/64"), netip.MustParsePrefix("10.7.0.5/24")
		// peer7 has only a link-local address: first-found passes it by.
		for _, m := range []string{"first-found", "interface=eth.*", "can-reach=fd00:7::99"} {
			got, err := Address6(m)
			if err != nil || got != want6 {
				t.Errorf("Address6(%s) = %s, %v; want %s", m, got, err, want6)
			}
		}
		if got, err := Address("first-found"); err != nil || got != want4 {
			t.Errorf("DetectAddress = %s, %v; want %s", got, err, want4)
		}
		if _, err := Address6("interface=nope.*"); err == nil {
			t.Error("no matching interface: no error")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
