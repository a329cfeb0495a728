package api

import (
	"strings"
	"testing"
)

// TestExternalNodeWarnings: entries of externalNodesList that admit
// more than they seem are named (field, index, entry): host bits set
// (admitted as the whole net, as Calico does: a warning, not a refusal)
// and a /0 of either family (the tunnel source check off); exact CIDRs
// and addresses, and entries that do not parse (ExternalNodeNets'
// errors), give none. Validate accepts the warned entries.
func TestExternalNodeWarnings(t *testing.T) {
	list := []string{"10.0.0.0/24", "10.0.0.5/24", "192.0.2.7", "0.0.0.0/0", "fd00::1/64", "::/0", "fd00:9::/64", "node-b"}
	got := ExternalNodeWarnings(&list)
	want := []string{
		`spec.externalNodesList[1] "10.0.0.5/24" has host bits set: it admits the whole 10.0.0.0/24`,
		`spec.externalNodesList[3] "0.0.0.0/0" admits every IPv4 source: the check of tunnel packets' outer source is off`,
		`spec.externalNodesList[4] "fd00::1/64" has host bits set: it admits the whole fd00::/64`,
		`spec.externalNodesList[5] "::/0" admits every IPv6 source`,
	}
	if len(got) != len(want) {
		t.Fatalf("warnings %q, want %d", got, len(want))
	}
	for i, w := range want {
		if !strings.Contains(got[i], w) {
			t.Errorf("warning %d %q does not say %q", i, got[i], w)
		}
	}
	if got := ExternalNodeWarnings(nil); got != nil {
		t.Errorf("unset list: %q", got)
	}
	ok := list[:7]
	c := &FelixConfiguration{Metadata: ObjectMeta{Name: "default"}, Spec: FelixConfigurationSpec{ExternalNodesCIDRList: &ok}}
	if err := c.Validate(); err != nil {
		t.Errorf("Validate refused warned entries: %v", err)
	}
}
