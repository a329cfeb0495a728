package api_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/routed-net/routed/pkg/api"
)

// TestIPReservation reads Calico's sample IPReservation (the reference
// page's "Sample YAML") and checks validation and normalisation.
func TestIPReservation(t *testing.T) {
	t.Parallel()
	d := mustDecode(t, `apiVersion: projectcalico.org/v3
kind: IPReservation
metadata:
  name: my-ipreservation-1
spec:
  reservedCIDRs:
    - 192.168.2.3
    - 10.0.2.3/32
    - cafe:f00d::/123
`)
	r := d.Resources[0].(*api.IPReservation)
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
	if len(d.Warnings) != 0 {
		t.Errorf("warnings %q", d.Warnings)
	}
	if got := strings.Join(r.Spec.ReservedCIDRs, ","); got != "192.168.2.3,10.0.2.3/32,cafe:f00d::/123" {
		t.Errorf("reservedCIDRs %s", got)
	}
	if got := r.ReservedPrefixes(); len(got) != 3 || got[0].String() != "192.168.2.3/32" || got[2].Bits() != 123 {
		t.Errorf("prefixes %v", got)
	}

	d = mustDecode(t, "apiVersion: projectcalico.org/v3\nkind: IPReservation\nmetadata: {name: r1}\nspec: {reservedCIDRs: [10.0.2.7/24, 'CAFE:F00D:0:0::1']}\n")
	r = d.Resources[0].(*api.IPReservation)
	if got := strings.Join(r.Spec.ReservedCIDRs, ","); got != "10.0.2.0/24,cafe:f00d::1" {
		t.Errorf("not normalised: %s", got)
	}

	for _, tc := range []struct{ in, want string }{
		{"[10.0.0.300]", "spec.reservedCIDRs[0]: is not an IP address or CIDR (got 10.0.0.300)"},
		{"[10.0.0.0/33]", "spec.reservedCIDRs[0]: is not an IP address or CIDR"},
		{"['fe80::1%eth0']", "has an IPv6 zone"},
		{"['::ffff:10.0.0.1']", "IPv4-mapped"},
		{"[10.0.0.1, 10.0.0.1/32]", "spec.reservedCIDRs[1]: repeats spec.reservedCIDRs[0]"},
		{"[]", "spec.reservedCIDRs: is required"},
	} {
		d := mustDecode(t, "apiVersion: projectcalico.org/v3\nkind: IPReservation\nmetadata: {name: r1}\nspec: {reservedCIDRs: "+tc.in+"}\n")
		err := d.Resources[0].Validate()
		if !errors.Is(err, api.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.in, err, tc.want)
		}
	}
}
