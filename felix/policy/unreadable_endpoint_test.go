package policy

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// TestSalvageEndpointAddrs: the addresses of an unreadable endpoint are
// read where the record holds them as routed writes them; anything
// that leaves one of them unknown gives none (the caller then denies
// all traffic).
func TestSalvageEndpointAddrs(t *testing.T) {
	for _, c := range []struct {
		name, raw string
		want      []string
	}{
		{"ports of another type", `{"metadata":{"name":"x"},"spec":{"ipNetworks":["10.0.0.1/32","fd00::1/128"],"ports":7}}`, []string{"10.0.0.1/32", "fd00::1/128"}},
		{"metadata of another type", `{"metadata":5,"spec":{"ipNetworks":["10.0.0.1"]}}`, []string{"10.0.0.1/32"}},
		{"a wider prefix, masked", `{"spec":{"ipNetworks":["10.0.0.9/30"]}}`, []string{"10.0.0.8/30"}},
		{"IPv4-mapped", `{"spec":{"ipNetworks":["::ffff:10.0.0.1/128"]}}`, []string{"10.0.0.1/32"}},
		{"field names as encoding/json matches them", `{"Spec":{"IPNETWORKS":["10.0.0.1/32"]}}`, []string{"10.0.0.1/32"}},
		{"not JSON", `{"spec":{"ipNetworks":["10.0.0.1/32"]`, nil},
		{"one entry not an address", `{"spec":{"ipNetworks":["10.0.0.1/32","ten"]}}`, nil},
		{"one entry not a string", `{"spec":{"ipNetworks":["10.0.0.1/32",7]}}`, nil},
		{"a zone", `{"spec":{"ipNetworks":["fe80::1%eth0"]}}`, nil},
		{"ipNetworks not a list", `{"spec":{"ipNetworks":"10.0.0.1/32"}}`, nil},
		{"spec not an object", `{"spec":"10.0.0.1/32"}`, nil},
		{"no addresses", `{"spec":{"node":"n1"}}`, nil},
		{"null", `null`, nil},
	} {
		var got []string
		for _, p := range SalvageEndpointAddrs([]byte(c.raw)) {
			got = append(got, p.String())
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: %s salvaged %v, want %v", c.name, c.raw, got, c.want)
		}
	}
	// What is salvaged compiles into the deny, both families.
	c := NewCalc(newRecSink(), LogConfig{})
	if err := c.SetUnreadableEndpoint("n-k8s-ns-p-eth0", nil, []netip.Prefix{netip.MustParsePrefix("10.0.0.1/32"), netip.MustParsePrefix("fd00::1/128")}, nil); err != nil {
		t.Fatal(err)
	}
	if got := c.unreadableList(); len(got) != 1 || got[0].Scope != "traffic from and to 10.0.0.1/32, fd00::1/128 at all workload endpoints" {
		t.Errorf("unreadable list %+v", got)
	}
	// A prefix wider than one address is left out: it would deny for
	// other pods (0.0.0.0/0: all of them).
	if err := c.SetUnreadableEndpoint("n-k8s-ns-p-eth0", nil, []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("10.0.0.2/32"), netip.MustParsePrefix("::/0")}, nil); err != nil {
		t.Fatal(err)
	}
	if got := c.unreadableList(); len(got) != 1 || got[0].Scope != "traffic from and to 10.0.0.2/32 at all workload endpoints" {
		t.Errorf("unreadable list with wide prefixes %+v", got)
	}
	if err := c.SetUnreadableEndpoint("n-k8s-ns-p-eth0", nil, []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}, nil); err != nil {
		t.Fatal(err)
	}
	if got := c.unreadableList(); len(got) != 1 || !strings.Contains(got[0].Scope, "no single address of it is known") {
		t.Errorf("unreadable list with 0.0.0.0/0 alone %+v", got)
	}
	if got := DeniableAddrs([]netip.Prefix{netip.MustParsePrefix("::ffff:10.0.0.3/128")}, []netip.Prefix{netip.MustParsePrefix("10.0.0.3/32"), {}}); !slices.Equal(got, []netip.Prefix{netip.MustParsePrefix("10.0.0.3/32")}) {
		t.Errorf("DeniableAddrs of an IPv4-mapped address and its IPv4 form: %v, want 10.0.0.3/32 once", got)
	}
	if _, ok := c.policies[UnreadableKey("WorkloadEndpoint", "n-k8s-ns-p-eth0")]; ok {
		t.Error("a deny stands for an endpoint whose only address is 0.0.0.0/0")
	}
}
