package confd

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/routed/bgp"
)

func node(name, addr string, asn api.ASNumber, cid string, labels ...string) *api.Node {
	n := &api.Node{Metadata: api.ObjectMeta{Name: name, Labels: map[string]string{}},
		Spec: api.NodeSpec{BGP: &api.NodeBGPSpec{IPv4Address: addr, ASNumber: asn, RouteReflectorClusterID: cid}}}
	for _, l := range labels {
		k, v, _ := strings.Cut(l, "=")
		n.Metadata.Labels[k] = v
	}
	return n
}

func cfg(name string, f func(*api.BGPConfigurationSpec)) *api.BGPConfiguration {
	c := &api.BGPConfiguration{Metadata: api.ObjectMeta{Name: name}}
	if f != nil {
		f(&c.Spec)
	}
	return c
}

func meshOff(s *api.BGPConfigurationSpec) { f := false; s.NodeToNodeMeshEnabled = &f }

func peer(name string, f func(*api.BGPPeerSpec)) *api.BGPPeer {
	p := &api.BGPPeer{Metadata: api.ObjectMeta{Name: name}, Spec: api.BGPPeerSpec{SourceAddress: api.SourceUseNodeIP}}
	f(&p.Spec)
	return p
}

// brief renders peers compactly: "10.0.0.2 AS64512 mesh/b" plus flags.
func brief(ps []PeerSpec) []string {
	var out []string
	for _, p := range ps {
		s := fmt.Sprintf("%s AS%d %s/%s", p.Address, p.ASN, shortType(p.Type), p.Name)
		if p.RRClient {
			s += " rrc=" + p.RRClusterID
		}
		if p.Port != 0 && p.Port != 179 {
			s += fmt.Sprintf(" port=%d", p.Port)
		}
		if !p.LocalAddress.IsValid() {
			s += " nosrc"
		}
		if p.PasswordSource != nil {
			s += " md5"
		}
		if p.LocalASN != 0 {
			s += fmt.Sprintf(" local-as=%d", p.LocalASN)
		}
		if p.KeepOriginalNextHop {
			s += " keepnh"
		}
		if p.NextHopSelf {
			s += " nhself"
		}
		if p.HoldTime != 0 || p.KeepaliveTime != 0 {
			s += fmt.Sprintf(" ka=%s hold=%s", p.KeepaliveTime, p.HoldTime)
		}
		out = append(out, s)
	}
	return out
}

func shortType(t string) string {
	switch t {
	case bgp.PeerTypeMesh:
		return "mesh"
	case bgp.PeerTypeNodeSpecific:
		return "node"
	case bgp.PeerTypeGlobal:
		return "global"
	case bgp.PeerTypeRouteReflector:
		return "rr"
	}
	return t
}

func TestComputePeers(t *testing.T) {
	threeNodes := []*api.Node{node("a", "10.0.0.1/24", 0, ""), node("b", "10.0.0.2/24", 0, ""), node("c", "10.0.0.3/24", 0, "")}
	rrNodes := []*api.Node{
		node("a", "10.0.0.1/24", 0, ""), node("b", "10.0.0.2/24", 0, ""),
		node("rr1", "10.0.0.11/24", 0, "224.0.0.1", "route-reflector=true"),
		node("rr2", "10.0.0.12/24", 0, "224.0.0.1", "route-reflector=true"),
		node("rr3", "10.0.0.13/24", 0, "224.0.0.2", "route-reflector=true"),
	}
	toRRs := peer("to-rrs", func(s *api.BGPPeerSpec) { s.NodeSelector = "all()"; s.PeerSelector = "route-reflector == 'true'" })

	tests := []struct {
		name    string
		local   string
		nodes   []*api.Node
		configs []*api.BGPConfiguration
		peers   []*api.BGPPeer
		want    []string
	}{{
		name: "full mesh by default", local: "a", nodes: threeNodes,
		want: []string{"10.0.0.2 AS64512 mesh/b", "10.0.0.3 AS64512 mesh/c"},
	}, {
		name: "nodes without an address are not meshed", local: "a",
		nodes: append(threeNodes[:2:2], &api.Node{Metadata: api.ObjectMeta{Name: "x"}}),
		want:  []string{"10.0.0.2 AS64512 mesh/b"},
	}, {
		name: "mesh off, no peers", local: "a", nodes: threeNodes,
		configs: []*api.BGPConfiguration{cfg("default", meshOff)},
	}, {
		name: "mesh uses each node's AS and port", local: "a", nodes: []*api.Node{
			node("a", "10.0.0.1/24", 0, ""), node("b", "10.0.0.2/24", 65001, ""), node("c", "10.0.0.3/24", 0, "")},
		configs: []*api.BGPConfiguration{
			cfg("default", func(s *api.BGPConfigurationSpec) { s.ASNumber = 64600 }),
			cfg("node.c", func(s *api.BGPConfigurationSpec) { s.ASNumber = 64700; s.ListenPort = 1179 }),
		},
		want: []string{"10.0.0.2 AS65001 mesh/b", "10.0.0.3 AS64700 mesh/c port=1179"},
	}, {
		name: "RR client peers with every RR", local: "a", nodes: rrNodes,
		configs: []*api.BGPConfiguration{cfg("default", meshOff)}, peers: []*api.BGPPeer{toRRs},
		want: []string{"10.0.0.11 AS64512 rr/rr1", "10.0.0.12 AS64512 rr/rr2", "10.0.0.13 AS64512 rr/rr3"},
	}, {
		name: "RR: clients, same-cluster non-client, other cluster as client", local: "rr1", nodes: rrNodes,
		configs: []*api.BGPConfiguration{cfg("default", meshOff)}, peers: []*api.BGPPeer{toRRs},
		want: []string{
			"10.0.0.1 AS64512 rr/a rrc=224.0.0.1", "10.0.0.2 AS64512 rr/b rrc=224.0.0.1",
			"10.0.0.12 AS64512 rr/rr2", "10.0.0.13 AS64512 rr/rr3 rrc=224.0.0.1",
		},
	}, {
		name: "RR selector peers replace mesh peers with the same address", local: "rr1", nodes: rrNodes,
		peers: []*api.BGPPeer{toRRs},
		want: []string{
			"10.0.0.1 AS64512 rr/a rrc=224.0.0.1", "10.0.0.2 AS64512 rr/b rrc=224.0.0.1",
			"10.0.0.12 AS64512 rr/rr2", "10.0.0.13 AS64512 rr/rr3 rrc=224.0.0.1",
		},
	}, {
		name: "selector peering is symmetric", local: "b", nodes: []*api.Node{
			node("a", "10.0.0.1/24", 0, "", "rack=1"), node("b", "10.0.0.2/24", 0, "", "rack=2")},
		configs: []*api.BGPConfiguration{cfg("default", meshOff)},
		peers: []*api.BGPPeer{peer("racks", func(s *api.BGPPeerSpec) {
			s.NodeSelector = "rack == '1'"
			s.PeerSelector = "rack == '2'"
		})},
		want: []string{"10.0.0.1 AS64512 global/a"},
	}, {
		// Calico's reversePeering Manual: rack 1 peers with rack 2, but
		// rack 2 does not peer back without a BGPPeer of its own.
		name: "reversePeering Manual is one-way (the selected side)", local: "b", nodes: []*api.Node{
			node("a", "10.0.0.1/24", 0, "", "rack=1"), node("b", "10.0.0.2/24", 0, "", "rack=2")},
		configs: []*api.BGPConfiguration{cfg("default", meshOff)},
		peers: []*api.BGPPeer{peer("racks", func(s *api.BGPPeerSpec) {
			s.NodeSelector = "rack == '1'"
			s.PeerSelector = "rack == '2'"
			s.ReversePeering = api.ReversePeeringManual
		})},
		want: nil,
	}, {
		name: "reversePeering Manual is one-way (the selecting side)", local: "a", nodes: []*api.Node{
			node("a", "10.0.0.1/24", 0, "", "rack=1"), node("b", "10.0.0.2/24", 0, "", "rack=2")},
		configs: []*api.BGPConfiguration{cfg("default", meshOff)},
		peers: []*api.BGPPeer{peer("racks", func(s *api.BGPPeerSpec) {
			s.NodeSelector = "rack == '1'"
			s.PeerSelector = "rack == '2'"
			s.ReversePeering = api.ReversePeeringManual
		})},
		want: []string{"10.0.0.2 AS64512 global/b"},
	}, {
		name: "localASNumber", local: "a", nodes: []*api.Node{node("a", "10.0.0.1/24", 0, "")},
		configs: []*api.BGPConfiguration{cfg("default", meshOff)},
		peers:   []*api.BGPPeer{peer("tor", func(s *api.BGPPeerSpec) { s.PeerIP = "192.0.2.1"; s.ASNumber = 65000; s.LocalASNumber = 65100 })},
		want:    []string{"192.0.2.1 AS65000 global/tor local-as=65100"},
	}, {
		name: "global, node-specific and node-selected external peers", local: "a", nodes: []*api.Node{
			node("a", "10.0.0.1/24", 0, "", "tor=t1"), node("b", "10.0.0.2/24", 0, "")},
		configs: []*api.BGPConfiguration{cfg("default", func(s *api.BGPConfigurationSpec) {
			meshOff(s)
			s.KeepaliveTime, s.HoldTime = "10s", "30s"
		})},
		peers: []*api.BGPPeer{
			peer("everyone", func(s *api.BGPPeerSpec) { s.PeerIP = "192.0.2.1"; s.ASNumber = 65000 }),
			peer("only-a", func(s *api.BGPPeerSpec) {
				s.Node = "a"
				s.PeerIP = "192.0.2.2"
				s.ASNumber = 65002
				s.Password = &api.PasswordSource{SecretKeyRef: &api.SecretKeyRef{Name: "bgp", Key: "tor"}}
				s.HoldTime = "9s"
				s.KeepaliveTime = "3s"
			}),
			peer("only-b", func(s *api.BGPPeerSpec) { s.Node = "b"; s.PeerIP = "192.0.2.3"; s.ASNumber = 65003 }),
			peer("tor-t1", func(s *api.BGPPeerSpec) {
				s.NodeSelector = "tor == 't1'"
				s.PeerIP = "192.0.2.4"
				s.ASNumber = 65004
				s.KeepOriginalNextHop = true
				s.SourceAddress = api.SourceNone
			}),
			peer("tor-t2", func(s *api.BGPPeerSpec) { s.NodeSelector = "tor == 't2'"; s.PeerIP = "192.0.2.5"; s.ASNumber = 65005 }),
			peer("self", func(s *api.BGPPeerSpec) { s.PeerIP = "10.0.0.1"; s.ASNumber = 65000 }),
		},
		want: []string{
			"192.0.2.1 AS65000 global/everyone ka=10s hold=30s",
			"192.0.2.2 AS65002 node/only-a md5 ka=3s hold=9s",
			"192.0.2.4 AS65004 global/tor-t1 nosrc keepnh ka=10s hold=30s",
		},
	}, {
		name: "explicit peer beats mesh for the same address", local: "a", nodes: threeNodes,
		peers: []*api.BGPPeer{peer("b-direct", func(s *api.BGPPeerSpec) { s.Node = "a"; s.PeerIP = "10.0.0.2"; s.ASNumber = 65009 })},
		want:  []string{"10.0.0.2 AS65009 node/b-direct", "10.0.0.3 AS64512 mesh/c"},
	}, {
		name: "bad selector is skipped", local: "a", nodes: threeNodes,
		configs: []*api.BGPConfiguration{cfg("default", meshOff)},
		peers: []*api.BGPPeer{
			peer("broken", func(s *api.BGPPeerSpec) { s.PeerSelector = "a ==" }),
			peer("ok", func(s *api.BGPPeerSpec) { s.PeerIP = "192.0.2.1"; s.ASNumber = 65000 }),
		},
		want: []string{"192.0.2.1 AS65000 global/ok"},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := Compute(Input{NodeName: tc.local, Nodes: tc.nodes, Configs: tc.configs, Peers: tc.peers})
			if d.Problem != "" {
				t.Fatal(d.Problem)
			}
			got := brief(d.Peers)
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("peers:\n got  %q\n want %q\nwarnings %q", got, tc.want, d.Warnings)
			}
			for _, p := range d.Peers {
				if p.Address.String() == strings.Split(tc.nodes[0].Spec.BGP.IPv4Address, "/")[0] && tc.local == tc.nodes[0].Metadata.Name {
					t.Errorf("peer with own address: %v", p)
				}
			}
		})
	}
}

func TestComputeGlobal(t *testing.T) {
	tests := []struct {
		name    string
		nodes   []*api.Node
		configs []*api.BGPConfiguration
		want    bgp.Global
		problem string
	}{{
		name:  "defaults",
		nodes: []*api.Node{node("a", "10.0.0.5/24", 0, "")},
		want:  bgp.Global{ASN: 64512, RouterID: netip.MustParseAddr("10.0.0.5"), ListenPort: 179},
	}, {
		name:    "default configuration",
		nodes:   []*api.Node{node("a", "10.0.0.5/24", 0, "")},
		configs: []*api.BGPConfiguration{cfg("default", func(s *api.BGPConfigurationSpec) { s.ASNumber = 64600; s.ListenPort = 1790; s.LogSeverity = "Debug" })},
		want:    bgp.Global{ASN: 64600, RouterID: netip.MustParseAddr("10.0.0.5"), ListenPort: 1790, LogSeverity: "Debug"},
	}, {
		name:  "node configuration beats default",
		nodes: []*api.Node{node("a", "10.0.0.5/24", 0, "")},
		configs: []*api.BGPConfiguration{
			cfg("default", func(s *api.BGPConfigurationSpec) { s.ASNumber = 64600 }),
			cfg("node.a", func(s *api.BGPConfigurationSpec) { s.ASNumber = 64700; s.ListenPort = 1791 }),
			cfg("node.b", func(s *api.BGPConfigurationSpec) { s.ASNumber = 64800 }),
		},
		want: bgp.Global{ASN: 64700, RouterID: netip.MustParseAddr("10.0.0.5"), ListenPort: 1791},
	}, {
		name:  "Node's own AS beats every configuration",
		nodes: []*api.Node{node("a", "10.0.0.5/24", 65001, "")},
		configs: []*api.BGPConfiguration{
			cfg("default", func(s *api.BGPConfigurationSpec) { s.ASNumber = 64600 }),
			cfg("node.a", func(s *api.BGPConfigurationSpec) { s.ASNumber = 64700 }),
		},
		want: bgp.Global{ASN: 65001, RouterID: netip.MustParseAddr("10.0.0.5"), ListenPort: 179},
	}, {
		name: "no Node", nodes: []*api.Node{node("b", "10.0.0.6/24", 0, "")}, problem: `no Node resource named "a"`,
	}, {
		name: "no address", nodes: []*api.Node{{Metadata: api.ObjectMeta{Name: "a"}}}, problem: "neither a valid spec.bgp.ipv4Address nor a valid spec.bgp.ipv6Address",
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := Compute(Input{NodeName: "a", Nodes: tc.nodes, Configs: tc.configs})
			if tc.problem != "" {
				if !strings.Contains(d.Problem, tc.problem) {
					t.Fatalf("problem %q, want %q", d.Problem, tc.problem)
				}
				return
			}
			if d.Problem != "" || d.Global != tc.want {
				t.Fatalf("global %+v (problem %q), want %+v", d.Global, d.Problem, tc.want)
			}
		})
	}
}

func TestServiceCIDRs(t *testing.T) {
	d := Compute(Input{NodeName: "a", Nodes: []*api.Node{node("a", "10.0.0.5/24", 0, "")},
		Configs: []*api.BGPConfiguration{cfg("default", func(s *api.BGPConfigurationSpec) {
			s.ServiceClusterIPs = []api.ServiceClusterIP{{CIDR: "10.96.0.0/12"}, {CIDR: "bogus"}}
		})}})
	if len(d.ServiceCIDRs) != 1 || d.ServiceCIDRs[0] != netip.MustParsePrefix("10.96.0.0/12") || len(d.Warnings) != 1 {
		t.Fatalf("service CIDRs %v warnings %q", d.ServiceCIDRs, d.Warnings)
	}
}

func TestReadPassword(t *testing.T) {
	dir := t.TempDir()
	file := dir + "/pw"
	mustWrite(t, file, "s3cret\n")
	mustWrite(t, dir+"/bgp/tor", "other")
	if pw, err := readPassword(&api.PasswordSource{File: file}, dir); err != nil || pw != "s3cret" {
		t.Fatalf("file: %v", err)
	}
	if pw, err := readPassword(&api.PasswordSource{SecretKeyRef: &api.SecretKeyRef{Name: "bgp", Key: "tor"}}, dir); err != nil || pw != "other" {
		t.Fatalf("secret: %v", err)
	}
	_, err := readPassword(&api.PasswordSource{SecretKeyRef: &api.SecretKeyRef{Name: "..", Key: "x"}}, dir)
	if err == nil {
		t.Fatal("path traversal accepted")
	}
	peers := resolvePeers([]PeerSpec{{Peer: bgp.Peer{Address: netip.MustParseAddr("192.0.2.1")},
		PasswordSource: &api.PasswordSource{SecretKeyRef: &api.SecretKeyRef{Name: "bgp", Key: "missing"}}}}, dir)
	if peers[0].ConfigError == "" || peers[0].Password != "" || !strings.Contains(peers[0].ConfigError, "bgp/missing") {
		t.Fatalf("missing secret: %+v", peers[0])
	}
	// The password never shows in formatted output.
	p := bgp.Peer{Password: "s3cret"}
	for _, s := range []string{fmt.Sprint(p), fmt.Sprintf("%+v", p), fmt.Sprintf("%#v", p)} {
		if strings.Contains(s, "s3cret") {
			t.Fatalf("password leaked: %s", s)
		}
	}
}

func mustWrite(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// Between two nodes exactly one side dials, the one Calico's BIRD
// template picks (the higher address as a string; the lower waits), so a
// routed node and a calico-node's BIRD form the session whichever of
// the two has the higher address (10.0.0.9 sorts after 10.0.0.10).
func TestNodePeeringsHaveOnePassiveSide(t *testing.T) {
	nodes := []*api.Node{node("a", "10.0.0.1/24", 0, ""), node("b", "10.0.0.2/24", 0, "")}
	pa := Compute(Input{NodeName: "a", Nodes: nodes}).Peers
	pb := Compute(Input{NodeName: "b", Nodes: nodes}).Peers
	if len(pa) != 1 || len(pb) != 1 || !pa[0].Passive || pb[0].Passive {
		t.Fatalf("a: %v, b: %v", pa, pb)
	}
	nodes = []*api.Node{node("a", "10.0.0.9/24", 0, ""), node("b", "10.0.0.10/24", 0, "")}
	pa = Compute(Input{NodeName: "a", Nodes: nodes}).Peers
	pb = Compute(Input{NodeName: "b", Nodes: nodes}).Peers
	if len(pa) != 1 || len(pb) != 1 || pa[0].Passive || !pb[0].Passive {
		t.Fatalf("10.0.0.9 must dial 10.0.0.10 (Calico compares the strings): a: %v, b: %v", pa, pb)
	}
	ext := Compute(Input{NodeName: "b", Nodes: nodes, Peers: []*api.BGPPeer{
		peer("tor", func(s *api.BGPPeerSpec) { s.PeerIP = "10.0.0.0"; s.ASNumber = 65000 })}}).Peers
	for _, p := range ext {
		if p.Name == "tor" && p.Passive {
			t.Fatal("external peers must be dialled")
		}
	}
}

// TestCalicoPeerOptions: Calico's nodeMeshPassword and
// nodeMeshMaxRestartTime reach the mesh sessions; a BGPPeer's
// "IP:port", maxRestartTime, numAllowedLocalASNumbers and ttlSecurity
// reach its session.
func TestCalicoPeerOptions(t *testing.T) {
	in := Input{
		NodeName: "n1",
		Nodes:    []*api.Node{node("n1", "10.0.0.1/24", 0, ""), node("n2", "10.0.0.2/24", 0, "")},
		Configs: []*api.BGPConfiguration{cfg("default", func(s *api.BGPConfigurationSpec) {
			s.NodeMeshPassword = &api.PasswordSource{SecretKeyRef: &api.SecretKeyRef{Name: "bgp", Key: "mesh"}}
			s.NodeMeshMaxRestartTime = "90s"
		})},
		Peers: []*api.BGPPeer{{Metadata: api.ObjectMeta{Name: "tor"}, Spec: api.BGPPeerSpec{
			PeerIP: "10.0.0.254:1179", ASNumber: 65000, MaxRestartTime: "45s", NumAllowedLocalASNumbers: 2, TTLSecurity: 1}}},
	}
	d := Compute(in)
	if d.Problem != "" || len(d.Peers) != 2 {
		t.Fatalf("%+v", d)
	}
	for _, p := range d.Peers {
		switch p.Address.String() {
		case "10.0.0.2":
			if p.PasswordSource == nil || p.PasswordSource.SecretKeyRef.Key != "mesh" || p.RestartTime != 90*time.Second {
				t.Errorf("mesh peer: %+v", p)
			}
		case "10.0.0.254":
			if p.Port != 1179 || p.RestartTime != 45*time.Second || p.AllowOwnAS != 2 || p.TTLHops != 1 || p.PasswordSource != nil {
				t.Errorf("ToR peer: %+v", p)
			}
		default:
			t.Errorf("unexpected peer %+v", p)
		}
	}
}

// TestPasswordFilesStayInTheSecretsDir: a BGPPeer could name any host
// file as its password (and routed would send it to a peer as MD5 key);
// now only files in the secrets directory are read, and a symlink there
// cannot point out of it.
func TestPasswordFilesStayInTheSecretsDir(t *testing.T) {
	dir, outside := t.TempDir(), t.TempDir()
	mustWrite(t, outside+"/host-secret", "not-for-bgp")
	mustWrite(t, dir+"/ok", "fine")
	if err := os.Symlink(outside+"/host-secret", dir+"/escape"); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{outside + "/host-secret", "../" + filepath.Base(outside) + "/host-secret", dir + "/../x", dir + "/escape"} {
		if pw, err := readPassword(&api.PasswordSource{File: f}, dir); err == nil || !errors.Is(err, ErrPassword) {
			t.Errorf("file %s: read %q, %v; want refused", f, pw, err)
		}
	}
	for _, f := range []string{dir + "/ok", "ok"} {
		if pw, err := readPassword(&api.PasswordSource{File: f}, dir); err != nil || pw != "fine" {
			t.Errorf("file %s inside the secrets dir: %q, %v", f, pw, err)
		}
	}
}
