package felix_test

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/routed-net/routed/felix"
	"github.com/routed-net/routed/felix/internal/nstest"
	"github.com/routed-net/routed/felix/policy"
	"github.com/routed-net/routed/pkg/api"
)

// TestHostEndpointFromFeed: a HostEndpoint of this node that names no
// interface, only its address, given to felix as the feed gives it,
// polices the interface holding that address: its traffic to the host
// is denied but for the failsafe ports felix was configured with (here
// 2222 instead of Calico's 22); deleting it opens the interface again.
func TestHostEndpointFromFeed(t *testing.T) {
	h := newHarness(t, func(c *felix.Config) {
		c.Features.DisablePolicy = false
		c.FailsafeInboundHostPorts = []policy.HostPort{{Proto: 6, Port: 2222}}
	})
	peer := nstest.New(t)
	link, err := h.ns.Handle.LinkByName("eth0peer")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.ns.Handle.LinkSetNsFd(link, int(peer.NetNS.Fd())); err != nil {
		t.Fatal(err)
	}
	if l, err := peer.Handle.LinkByName("eth0peer"); err != nil || peer.Handle.LinkSetUp(l) != nil {
		t.Fatalf("peer link: %v", err)
	}
	peer.AddAddr(t, "eth0peer", "192.0.2.2/24")
	for _, port := range []string{"80", "22", "2222"} {
		acceptTCP(t, h.ns, "192.0.2.1:"+port)
	}
	reach := func(port string) bool {
		var ok bool
		peer.Do(t, func() error {
			c, err := net.DialTimeout("tcp", "192.0.2.1:"+port, 400*time.Millisecond)
			if err == nil {
				c.Close()
			}
			ok = err == nil
			return nil
		})
		return ok
	}
	expect := func(why string, want map[string]bool) {
		t.Helper()
		nstest.Eventually(t, 10*time.Second, func() string {
			for port, w := range want {
				if got := reach(port); got != w {
					return why + ": port " + port + map[bool]string{true: " answered", false: " dropped"}[got]
				}
			}
			return ""
		})
	}
	base := map[api.Kind][]api.Resource{api.KindIPPool: nil, api.KindNode: nil, api.KindWorkloadEndpoint: nil}
	h.f.ReplaceResources(base)
	h.f.ReplaceAffinities(nil)
	expect("no host endpoint", map[string]bool{"80": true, "22": true, "2222": true})

	hep := &api.HostEndpoint{TypeMeta: api.TypeMeta{Kind: api.KindHostEndpoint}, Metadata: api.ObjectMeta{Name: "node-a-eth0"},
		Spec: api.HostEndpointSpec{Node: "node-a", ExpectedIPs: []string{"192.0.2.1"}}}
	h.f.SetResource(hep)
	expect("host endpoint found by address", map[string]bool{"80": false, "22": false, "2222": true})

	h.f.DeleteResource(api.KindHostEndpoint, "node-a-eth0")
	expect("host endpoint deleted", map[string]bool{"80": true, "22": true, "2222": true})
}

// TestFailsafeConfigChecked: a failsafe port felix cannot open is a
// start-up error naming the field and the entry.
func TestFailsafeConfigChecked(t *testing.T) {
	for _, c := range []struct {
		cfg  felix.Config
		want string
	}{
		{felix.Config{NodeName: "n", FailsafeInboundHostPorts: []policy.HostPort{{Proto: 1, Port: 22}}}, "FailsafeInboundHostPorts[0]"},
		{felix.Config{NodeName: "n", FailsafeOutboundHostPorts: []policy.HostPort{{Proto: 6, Port: 53}, {Proto: 17}}}, "FailsafeOutboundHostPorts[1]"},
	} {
		if _, err := felix.New(c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error naming %s", c.cfg.FailsafeInboundHostPorts, err, c.want)
		}
	}
	if _, err := felix.New(felix.Config{NodeName: "n", FailsafeInboundHostPorts: []policy.HostPort{}}); err != nil {
		t.Errorf("no failsafe port at all (empty, not nil) is allowed: %v", err)
	}
}
