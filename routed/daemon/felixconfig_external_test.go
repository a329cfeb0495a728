package daemon

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/routed-net/routed/pkg/api"
)

// TestExternalNodesParsed: externalNodesList reaches felix as nets (an
// address as a /32 or /128, host bits cleared); a list with a bad entry,
// stored past validation, admits no external source at all rather than
// the entries that parse.
func TestExternalNodesParsed(t *testing.T) {
	list := []string{"192.0.2.7", "10.9.1.2/16", "fd00:9::1/64"}
	got := externalNodes(api.FelixConfigurationSpec{ExternalNodesCIDRList: &list})
	want := []netip.Prefix{netip.MustParsePrefix("192.0.2.7/32"), netip.MustParsePrefix("10.9.0.0/16"), netip.MustParsePrefix("fd00:9::/64")}
	if !slices.Equal(got, want) {
		t.Errorf("externalNodes(%v) = %v, want %v", list, got, want)
	}
	if got := externalNodes(api.FelixConfigurationSpec{}); got != nil {
		t.Errorf("unset list: %v, want none", got)
	}
	bad := []string{"10.9.0.0/16", "node-b"}
	if got := externalNodes(api.FelixConfigurationSpec{ExternalNodesCIDRList: &bad}); got != nil {
		t.Errorf("a list with a bad entry admitted %v", got)
	}
	if _, err := api.ExternalNodeNets(&bad); err == nil {
		t.Error("ExternalNodeNets accepted a name")
	} else if want := `spec.externalNodesList[1] "node-b"`; !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not name %s", err, want)
	}
}
