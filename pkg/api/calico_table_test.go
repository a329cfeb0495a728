package api_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/routed-net/routed/pkg/api"
)

// TestCalicoFieldTable reads Calico's own sample files (and samples with
// one field set; see testdata/calico/README.md) and checks each verdict:
// applies (valid, with exactly the expected warnings, naming the field),
// or refused with an error naming the field and why.
func TestCalicoFieldTable(t *testing.T) {
	tests := []struct {
		file string
		// warn lists the fields a warning must name (and no others warn).
		warn []string
		// refuse, when set, is what the error must name.
		refuse []string
		check  func(t *testing.T, r api.Resource)
	}{
		{file: "ippool-reference.yaml", warn: []string{"spec.allowedUses"}, check: func(t *testing.T, r api.Resource) {
			p := r.(*api.IPPool)
			if p.Spec.CIDR != "10.1.0.0/16" || p.Spec.IPIPMode != "CrossSubnet" || !p.Spec.NATOutgoing {
				t.Errorf("pool %+v", p.Spec)
			}
		}},
		{file: "ippool-tunnel-only.yaml", refuse: []string{"spec.allowedUses", "cannot be ignored", "Workload"}},
		{file: "ippool-no-bgp-export.yaml", check: func(t *testing.T, r api.Resource) {
			if p := r.(*api.IPPool); !p.Spec.DisableBGPExport {
				t.Errorf("disableBGPExport not carried: %+v", p.Spec)
			}
		}},
		{file: "ippool-namespace-selector.yaml", refuse: []string{"spec.namespaceSelector", "namespace"}},
		{file: "bgppeer-reference.yaml", check: func(t *testing.T, r api.Resource) {
			p := r.(*api.BGPPeer)
			if p.Spec.Node != "rack1-host1" || p.Spec.PeerIP != "192.168.1.1" || p.Spec.ASNumber != 63400 {
				t.Errorf("peer %+v", p.Spec)
			}
		}},
		{file: "bgppeer-route-reflectors.yaml", check: func(t *testing.T, r api.Resource) {
			if p := r.(*api.BGPPeer); p.Spec.PeerSelector != "route-reflector == 'true'" || p.Spec.NodeSelector != "all()" {
				t.Errorf("peer %+v", p.Spec)
			}
		}},
		{file: "bgppeer-next-hop-keep.yaml", check: func(t *testing.T, r api.Resource) {
			if r.(*api.BGPPeer).Spec.NextHopMode != api.NextHopKeep {
				t.Error("nextHopMode Keep was not read")
			}
		}},
		{file: "bgppeer-reachable-by.yaml", check: func(t *testing.T, r api.Resource) {
			if p := r.(*api.BGPPeer); p.Spec.ReachableBy != "10.0.0.1" || p.Spec.PeerIP != "192.168.1.1" {
				t.Errorf("peer %+v", p.Spec)
			}
		}},
		{file: "bgppeer-local-as.yaml", check: func(t *testing.T, r api.Resource) {
			if p := r.(*api.BGPPeer); p.Spec.LocalASNumber != 64000 || p.Spec.ReversePeering != api.ReversePeeringManual {
				t.Errorf("peer %+v", p.Spec)
			}
		}},
		{file: "bgpconfig-reference.yaml", check: func(t *testing.T, r api.Resource) {
			c := r.(*api.BGPConfiguration)
			if c.Spec.ListenPort != 178 || c.Spec.LogSeverity != "Info" || c.Spec.BindMode != "NodeIP" || len(c.Spec.PrefixAdvertisements) != 1 || len(c.Spec.ServiceExternalIPs) != 2 {
				t.Errorf("config %+v", c.Spec)
			}
		}},
		// Who programs the cluster routes: in routed always felix.
		{file: "bgpconfig-no-cluster-routes.yaml", warn: []string{"spec.programClusterRoutes"}},
		// Calico's defaults are what routed does: dropped, the priority with a note.
		{file: "bgpconfig-route-priority.yaml", warn: []string{"spec.ipv4NormalRoutePriority"}},
		{file: "node-reference.yaml", check: func(t *testing.T, r api.Resource) {
			n := r.(*api.Node)
			if n.Spec.BGP.IPv4Address != "10.244.0.1/24" || n.Spec.BGP.IPv4IPIPTunnelAddr != "192.168.0.1" ||
				n.Spec.BGP.IPv6Address != "2001:db8:85a3::8a2e:370:7334/120" {
				t.Errorf("node %+v", n.Spec.BGP)
			}
		}},
		{file: "bgpfilter-reference.yaml", check: func(t *testing.T, r api.Resource) {
			f := r.(*api.BGPFilter)
			if len(f.Spec.ExportV4) != 2 || f.Spec.ExportV4[0].Source != "RemotePeers" || f.Spec.ExportV4[1].Interface != "*.calico" ||
				f.Spec.ImportV4[0].PrefixLength == nil || *f.Spec.ImportV4[0].PrefixLength.Min != 30 {
				t.Errorf("filter %+v", f.Spec)
			}
		}},
		{file: "globalnetworkpolicy-reference.yaml", check: func(t *testing.T, r api.Resource) {
			p := r.(*api.GlobalNetworkPolicy)
			in := p.Spec.Ingress[0]
			if p.Spec.Tier != "default" || len(p.Spec.Types) != 2 || in.Destination.Ports[0] != api.SinglePort(6379) || in.Metadata.Annotations["from"] != "frontend" {
				t.Errorf("policy %+v", p.Spec)
			}
		}},
		{file: "networkpolicy-reference.yaml", check: func(t *testing.T, r api.Resource) {
			if p := r.(*api.NetworkPolicy); api.StoreName(p) != "production.allow-tcp-6379" || p.Spec.Selector != "role == 'database'" {
				t.Errorf("policy %s %+v", api.StoreName(p), p.Spec)
			}
		}},
		{file: "tier-reference.yaml", check: func(t *testing.T, r api.Resource) {
			if tr := r.(*api.Tier); *tr.Spec.Order != 100 || *tr.Spec.DefaultAction != api.ActionDeny {
				t.Errorf("tier %+v", tr.Spec)
			}
		}},
		{file: "profile-reference.yaml", check: func(t *testing.T, r api.Resource) {
			if p := r.(*api.Profile); p.Spec.LabelsToApply["stage"] != "development" {
				t.Errorf("profile %+v", p.Spec)
			}
		}},
		{file: "globalnetworkset-sample.yaml", check: func(t *testing.T, r api.Resource) {
			if s := r.(*api.GlobalNetworkSet); len(s.Spec.Nets) != 2 || s.Metadata.Labels["role"] != "external-database" {
				t.Errorf("set %+v", s)
			}
		}},
		{file: "networkset-sample.yaml", check: func(t *testing.T, r api.Resource) {
			if s := r.(*api.NetworkSet); api.StoreName(s) != "staging.external-database" || len(s.Spec.Nets) != 2 {
				t.Errorf("set %+v", s)
			}
		}},
		{file: "globalnetworkpolicy-do-not-track.yaml", check: func(t *testing.T, r api.Resource) {
			if p := r.(*api.GlobalNetworkPolicy); !p.Spec.DoNotTrack || !p.Spec.ApplyOnForward || p.Spec.PreDNAT {
				t.Errorf("host-endpoint fields not carried: %+v", p.Spec)
			}
		}},
		{file: "globalnetworkpolicy-apply-on-forward.yaml", check: func(t *testing.T, r api.Resource) {
			if p := r.(*api.GlobalNetworkPolicy); !p.Spec.ApplyOnForward || p.Spec.DoNotTrack {
				t.Errorf("applyOnForward not carried: %+v", p.Spec)
			}
		}},
		{file: "networkpolicy-http.yaml", refuse: []string{"spec.ingress[0].http", "application-layer"}},
		{file: "networkpolicy-services.yaml", check: func(t *testing.T, r api.Resource) {
			if sm := r.(*api.NetworkPolicy).Spec.Egress[0].Destination.Services; sm == nil || *sm != (api.ServiceMatch{Name: "kubernetes", Namespace: "default"}) {
				t.Errorf("services %+v", sm)
			}
		}},
		// calicoctl's own test data (projectcalico/calico calicoctl/test-data).
		// nat-outgoing is a Calico v1 spelling that Calico v3 refuses too.
		{file: "calicoctl-ippool.yaml", refuse: []string{"spec.nat-outgoing", "natOutgoing"}},
		{file: "calicoctl-bgppeer-node.yaml", check: func(t *testing.T, r api.Resource) {
			if p := r.(*api.BGPPeer); p.Metadata.Name != "arbitrary.name" || p.Spec.Node != "rack1-host1" || p.Spec.ASNumber != 63400 {
				t.Errorf("peer %+v", p)
			}
		}},
		{file: "calicoctl-bgppeer-global.yaml", check: func(t *testing.T, r api.Resource) {
			if p := r.(*api.BGPPeer); p.Spec.Node != "" || p.Spec.NodeSelector != "" || p.Spec.PeerIP != "1.1.1.1" || p.Spec.ASNumber != 63444 {
				t.Errorf("global peer %+v", p.Spec)
			}
		}},
		{file: "calicoctl-convert-bgppeer.yaml", check: func(t *testing.T, r api.Resource) {
			if p := r.(*api.BGPPeer); p.Metadata.Name != "rack1-host1.192-168-1-1" || p.Spec.PeerIP != "192.168.1.1" {
				t.Errorf("peer %+v", p)
			}
		}},
		// creationTimestamp: null and status: {} as calicoctl convert writes them.
		{file: "calicoctl-convert-ippool.yaml", warn: []string{"spec.allowedUses"}, check: func(t *testing.T, r api.Resource) {
			if p := r.(*api.IPPool); p.Spec.CIDR != "10.1.0.0/16" || p.Spec.BlockSize != 26 || p.Spec.IPIPMode != "CrossSubnet" || !p.Spec.NATOutgoing || p.Spec.NodeSelector != "all()" {
				t.Errorf("pool %+v", p.Spec)
			}
		}},
		{file: "calicoctl-convert-node.yaml", warn: []string{"status"}, check: func(t *testing.T, r api.Resource) {
			if n := r.(*api.Node); n.Spec.BGP.IPv4Address != "10.244.0.1/24" || n.Spec.BGP.ASNumber != 64512 || n.Spec.BGP.IPv6Address != "2001:db8:85a3::8a2e:370:7334/120" {
				t.Errorf("node %+v", n.Spec.BGP)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", "calico", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			d, err := api.Decode(data)
			if tc.refuse != nil {
				if err == nil {
					t.Fatalf("applied; want it refused naming %q", tc.refuse)
				}
				for _, m := range tc.refuse {
					if !strings.Contains(err.Error(), m) {
						t.Errorf("error does not name %q: %v", m, err)
					}
				}
				t.Logf("refused: %v", err)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(d.Warnings) != len(tc.warn) {
				t.Errorf("warnings %q, want one each for %q", d.Warnings, tc.warn)
			}
			for _, f := range tc.warn {
				if !slices.ContainsFunc(d.Warnings, func(w string) bool { return strings.Contains(w, " "+f+" ") }) {
					t.Errorf("no warning names %s: %q", f, d.Warnings)
				}
			}
			r := d.Resources[0]
			if err := r.Validate(); err != nil {
				t.Fatalf("does not validate: %v", err)
			}
			if tc.check != nil {
				tc.check(t, r)
			}
		})
	}
}
