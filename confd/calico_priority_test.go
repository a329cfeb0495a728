package confd

import (
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/routed/bgp"
)

// TestCalicoFilterPriorities: the LOCAL_PREF values the BGPFilter rules
// of Calico's priority inputs set and match on the session with
// 10.192.0.3 are the ones in Calico's compiled BIRD configurations
// (projectcalico/calico confd/tests/compiled_templates/bgpfilter/<input>/bird.cfg,
// "bgp_local_pref = N" per rule, in order; the peer_type import rule is
// iBGP-only and the kubevirt export rules eBGP-only, so each session
// gets the ones of its kind).
func TestCalicoFilterPriorities(t *testing.T) {
	for _, c := range []struct {
		input          string
		import_, match []uint32 // per rule: LOCAL_PREF set, matched (0: none)
	}{
		{"as_path_and_priority", []uint32{2147483547, 2147483447, 0}, []uint32{2147483547, 2147483447, 0}},
		{"kubevirt_live_migration", []uint32{2147483547, 2147483447, 0}, []uint32{2147483547, 2147483447, 0}},
		{"communities_and_operations", []uint32{2147483391, 0}, []uint32{0, 0}},
		{"peer_type", []uint32{2147483547, 0}, []uint32{0, 0}},
	} {
		t.Run(c.input, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", "calico-confd", "bgpfilter", c.input, "input.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			d, err := api.Decode(data)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range d.Resources {
				if err := r.Validate(); err != nil {
					t.Fatalf("refused: %v", err)
				}
			}
			out := Compute(inputFrom(d.Resources, "kube-master"))
			pf, ok := out.Filters[netip.MustParseAddr("10.192.0.3")]
			if !ok {
				t.Fatalf("no filters for 10.192.0.3: %v", out.Filters)
			}
			lp := func(rules []bgp.FilterRule, f func(bgp.FilterRule) uint32) []uint32 {
				var out []uint32
				for _, r := range rules {
					v := f(r)
					if v != 0 {
						v = api.LocalPrefForPriority(v)
					}
					out = append(out, v)
				}
				return out
			}
			if got := lp(pf.Import, func(r bgp.FilterRule) uint32 { return r.SetPriority }); !slices.Equal(got, c.import_) {
				t.Errorf("import LOCAL_PREF set %v, Calico's BIRD %v", got, c.import_)
			}
			if got := lp(pf.Export, func(r bgp.FilterRule) uint32 { return r.Priority }); !slices.Equal(got, c.match) {
				t.Errorf("export LOCAL_PREF matched %v, Calico's BIRD %v", got, c.match)
			}
			t.Logf("import %v export %v", pf.Import, pf.Export)
		})
	}
}
