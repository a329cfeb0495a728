package kernel

import (
	"fmt"
	"os"
	"os/exec"
	"testing"

	"github.com/routed-net/routed/internal/testenv"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// The rule is no looser than the kernel: every name it accepts, the
// kernel accepts as a device name, and every name the kernel refuses
// (dev_valid_name: '/', ':', white space, 16+ bytes; a bad '%'
// template), it refuses.
func TestHostDeviceNameRuleVsKernel(t *testing.T) {
	testenv.RequireRoot(t, "network namespaces")
	name := fmt.Sprintf("kernel-names-%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", name, err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	nsh, err := netns.GetFromName(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nsh.Close() })
	h, err := netlink.NewHandleAt(nsh)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	peers := 0
	add := func(n string) error {
		peers++
		return h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: n}, PeerName: fmt.Sprintf("peer%d", peers)})
	}

	for _, n := range []string{HostDeviceName("default", "nginx", ""), HostDeviceName("", "", "cid"), "cali1", "cali!#$&'()*+,", "cali-._~"} {
		if err := CheckHostDeviceName(n); err != nil {
			t.Fatalf("%q: %v", n, err)
		}
		if err := add(n); err != nil {
			t.Errorf("the rule accepts %q but the kernel refuses it: %v", n, err)
		}
	}
	for _, n := range []string{"cali/x", "cali:x", "cali x", "cali\tx", "cali\nx", "cali\vx", "cali\fx", "cali\rx", "cali0123456789ab", "cali%x"} {
		kerr := add(n)
		if kerr == nil {
			t.Errorf("the kernel accepted %q; this test's premise is wrong", n)
		}
		if CheckHostDeviceName(n) == nil {
			t.Errorf("the kernel refuses %q (%v) but the rule accepts it", n, kerr)
		}
	}
}
