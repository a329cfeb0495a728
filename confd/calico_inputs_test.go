package confd

import (
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/routed-net/routed/pkg/api"
)

// calicoRefused are the Calico confd inputs (testdata/calico-confd) that
// routedctl refuses, with what the error must name: each is a field
// routed cannot honour (see the field table in pkg/api/calico.go). None
// is left.
var calicoRefused = map[string]string{}

// calicoNoExport are the pools Calico's BIRD export filter rejects
// (disableBGPExport: true), per input; other inputs have none.
var calicoNoExport = map[string]string{
	"mesh/bgp-export": "[192.168.2.0/24 2002:102::/64]",
}

// calicoDiffers are the inputs that apply but whose sessions differ from
// Calico's BIRD configuration, with why.
var calicoDiffers = map[string]string{
	// GoBGP, like routed, knows a neighbor by its address alone.
	"explicit_peering/global":          "two BGPPeers for one address on two ports make one session, not two",
	"explicit_peering/global-external": "two BGPPeers for one address on two ports make one session, not two",
	"explicit_peering/local-as-global": "two BGPPeers for one address on two ports make one session, not two",
	// Calico's daemon test writes felix's endpoint status files by hand,
	// naming test-node-peer-with-filter for pod2; but both BGPPeers
	// select both pods, and Calico's felix (ActiveBGPPeerCalculator)
	// would pick the first by name for each. routed-peers.txt holds
	// what that rule gives.
	"local_bgp_peer": "pod2 peers through the first matching BGPPeer by name, as Calico's felix picks it, not the one the test's status file names",
}

// TestCalicoConfdInputs applies every file of Calico's confd BGP test
// inputs as routedctl does (api.Decode, then each resource's validation)
// and, for the node Calico's expected BIRD configurations are for
// (kube-master, or node1 in Calico's daemon tests), compares the sessions confd computes with the BIRD
// configuration Calico expects: peer address, AS, port, route reflector
// client, next hop self or keep, local AS.
func TestCalicoConfdInputs(t *testing.T) {
	root := filepath.Join("testdata", "calico-confd")
	var dirs []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Name() == "input.yaml" {
			rel, _ := filepath.Rel(root, filepath.Dir(p))
			dirs = append(dirs, rel)
		}
		return err
	})
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no inputs under %s: %v", root, err)
	}
	applied := 0
	for _, rel := range dirs {
		t.Run(rel, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join(root, rel, "input.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			// A step2 input is applied on top of the input of its parent.
			if base, ok := strings.CutSuffix(rel, "/step2"); ok {
				first, err := os.ReadFile(filepath.Join(root, base, "input.yaml"))
				if err != nil {
					t.Fatal(err)
				}
				data = append(append(first, "\n---\n"...), data...)
			}
			d, err := api.Decode(data)
			if err == nil {
				for _, r := range d.Resources {
					if verr := r.Validate(); verr != nil {
						err = verr
					}
				}
			}
			if why, ok := calicoRefused[rel]; ok {
				if err == nil || !strings.Contains(err.Error(), why) {
					t.Fatalf("want refused naming %q, got %v", why, err)
				}
				t.Logf("refused: %v", err)
				return
			}
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			applied++
			want, err := os.ReadFile(filepath.Join(root, rel, "expected-peers.txt"))
			if os.IsNotExist(err) {
				return // Calico checks something other than BIRD's sessions here
			}
			if err != nil {
				t.Fatal(err)
			}
			rs := d.Resources
			// Pods the input's BGPPeers may select (routed's own file:
			// Calico's test gives them to confd as felix's status files).
			if wl, err := os.ReadFile(filepath.Join(root, rel, "workloads.yaml")); err == nil {
				wd, err := api.Decode(wl)
				if err != nil {
					t.Fatalf("workloads.yaml: %v", err)
				}
				for _, r := range wd.Resources {
					if err := r.Validate(); err != nil {
						t.Fatalf("workloads.yaml: %v", err)
					}
				}
				rs = append(rs, wd.Resources...)
			}
			in := inputFrom(rs, "kube-master")
			if !slices.ContainsFunc(in.Nodes, func(n *api.Node) bool { return n.Metadata.Name == in.NodeName }) {
				in.NodeName = "node1" // Calico's daemon tests' node
			}
			out := Compute(in)
			if out.Problem != "" || len(out.Warnings) > 0 {
				t.Logf("problem %q, warnings %q", out.Problem, out.Warnings)
			}
			if got, want := fmt.Sprint(out.NoExportCIDRs), calicoNoExport[rel]; got != want && (want != "" || len(out.NoExportCIDRs) > 0) {
				t.Errorf("no-export CIDRs %s, want %q", got, want)
			}
			got := sessionLines(out)
			wantLines := withoutMulticast(t, lines(want))
			if want, err := os.ReadFile(filepath.Join(root, rel, "expected-peer-routes.txt")); err == nil || len(out.PeerRoutes) > 0 {
				if got, want := peerRouteLines(out), withoutMulticast(t, lines(want)); !slices.Equal(got, want) {
					t.Errorf("routes to peers differ from Calico's static routes:\n got  %q\n want %q", got, want)
				}
			}
			if why, ok := calicoDiffers[rel]; ok {
				t.Logf("differs from Calico (%s):\n got  %q\n want %q", why, got, wantLines)
				if routed, err := os.ReadFile(filepath.Join(root, rel, "routed-peers.txt")); err == nil {
					if want := lines(routed); !slices.Equal(got, want) {
						t.Errorf("sessions differ from routed-peers.txt:\n got  %q\n want %q", got, want)
					}
				}
				return
			}
			if !slices.Equal(got, wantLines) {
				t.Errorf("sessions differ from Calico's BIRD configuration:\n got  %q\n want %q", got, wantLines)
			}
		})
	}
	t.Logf("%d of %d inputs apply", applied, len(dirs))
}

// lines are a test data file's lines, sorted.
func lines(b []byte) []string {
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	slices.Sort(out)
	return out
}

// withoutMulticast leaves out the lines for multicast peers (Calico's
// test data has ffee::10 and ffee::11): routed accepts such a BGPPeer
// but, as no TCP session can reach it, configures neither a session nor
// a route for it, and warns.
func withoutMulticast(t *testing.T, ls []string) []string {
	var out []string
	for _, l := range ls {
		addr, _, _ := strings.Cut(strings.Fields(l)[0], "/")
		if a, err := netip.ParseAddr(addr); err == nil && a.IsMulticast() {
			t.Logf("multicast peer, no session or route in routed: %s", l)
			continue
		}
		out = append(out, l)
	}
	return out
}

// peerRouteLines renders the routes to peers with reachableBy as the
// test data's expected-peer-routes.txt renders Calico's static routes.
func peerRouteLines(d Desired) []string {
	var out []string
	for peer, gw := range d.PeerRoutes {
		out = append(out, fmt.Sprintf("%s via %s", netip.PrefixFrom(peer, peer.BitLen()), gw))
	}
	slices.Sort(out)
	return out
}

// inputFrom is confd's input from decoded resources.
func inputFrom(rs []api.Resource, node string) Input {
	in := Input{NodeName: node, Filters: map[string]*api.BGPFilter{}}
	// A later resource of the same kind and name replaces an earlier one.
	last := map[string]int{}
	for i, r := range rs {
		last[string(r.GetKind())+"/"+r.Meta().Name] = i
	}
	for i, r := range rs {
		if last[string(r.GetKind())+"/"+r.Meta().Name] != i {
			continue
		}
		switch v := r.(type) {
		case *api.Node:
			in.Nodes = append(in.Nodes, v)
		case *api.BGPConfiguration:
			in.Configs = append(in.Configs, v)
		case *api.BGPPeer:
			in.Peers = append(in.Peers, v)
		case *api.BGPFilter:
			in.Filters[v.Metadata.Name] = v
		case *api.IPPool:
			in.Pools = append(in.Pools, v)
		case *api.WorkloadEndpoint:
			in.Workloads = append(in.Workloads, v)
		}
	}
	return in
}

// sessionLines renders sessions as the test data's expected-peers.txt
// renders Calico's BIRD protocols, sorted.
func sessionLines(d Desired) []string {
	var out []string
	for _, p := range d.Peers {
		l := fmt.Sprintf("%s as %d", p.Address, p.ASN)
		if p.Port != 0 && p.Port != 179 {
			l += fmt.Sprintf(" port %d", p.Port)
		}
		var flags []string
		if p.LocalASN != 0 {
			flags = append(flags, fmt.Sprintf("local-as=%d", p.LocalASN))
		}
		if p.KeepOriginalNextHop {
			flags = append(flags, "next-hop-keep")
		}
		if p.NextHopSelf {
			flags = append(flags, "next-hop-self")
		}
		if p.RRClient {
			flags = append(flags, "rr-client")
		}
		slices.Sort(flags)
		for _, f := range flags {
			l += " " + f
		}
		out = append(out, l)
	}
	slices.Sort(out)
	return out
}
