package api_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/routed-net/routed/pkg/api"
)

// checkValid asserts that err is nil when wantFields is empty, and
// otherwise that it is an ErrInvalid whose FieldErrors include every
// wanted field, with each field named in the message an operator reads.
func checkValid(t *testing.T, err error, wantFields ...string) {
	t.Helper()
	if len(wantFields) == 0 {
		if err != nil {
			t.Fatalf("want valid, got %v", err)
		}
		return
	}
	if err == nil {
		t.Fatalf("want invalid %v, got nil", wantFields)
	}
	if !errors.Is(err, api.ErrInvalid) {
		t.Fatalf("errors.Is(%v, ErrInvalid) = false", err)
	}
	var ve *api.ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("want *api.ValidationError, got %T: %v", err, err)
	}
	got := map[string]bool{}
	for _, f := range ve.Fields {
		got[f.Field] = true
	}
	for _, w := range wantFields {
		if !got[w] {
			t.Errorf("want an error on field %s, got %v", w, err)
		}
		if !strings.Contains(err.Error(), w) {
			t.Errorf("message does not name field %s: %v", w, err)
		}
	}
}

// checkDetail asserts the message also explains the problem.
func checkDetail(t *testing.T, err error, detail string) {
	t.Helper()
	if detail != "" && (err == nil || !strings.Contains(err.Error(), detail)) {
		t.Errorf("message should contain %q, got %v", detail, err)
	}
}

func validPool() *api.IPPool {
	p := &api.IPPool{
		TypeMeta: api.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindIPPool},
		Metadata: api.ObjectMeta{Name: "pool1"},
		Spec:     api.IPPoolSpec{CIDR: "10.244.0.0/16"},
	}
	api.SetDefaults(p)
	return p
}

func TestIPPoolValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		mutate func(p *api.IPPool)
		fields []string
		detail string
	}{
		{name: "defaults are valid", mutate: func(p *api.IPPool) {}},
		{name: "smallest pool with /32 blocks", mutate: func(p *api.IPPool) { p.Spec.CIDR = "10.0.0.1/32"; p.Spec.BlockSize = 32 }},
		{name: "block equal to pool", mutate: func(p *api.IPPool) { p.Spec.CIDR = "10.0.0.0/26" }},
		{name: "block /20 in /8", mutate: func(p *api.IPPool) { p.Spec.CIDR = "10.0.0.0/8"; p.Spec.BlockSize = 20 }},
		{name: "ipip always", mutate: func(p *api.IPPool) { p.Spec.IPIPMode = api.EncapAlways }},
		{name: "ipip cross-subnet", mutate: func(p *api.IPPool) { p.Spec.IPIPMode = api.EncapCrossSubnet }},
		{name: "node selector", mutate: func(p *api.IPPool) { p.Spec.NodeSelector = "has(rack) && zone == 'a'" }},
		{name: "nat and disabled", mutate: func(p *api.IPPool) { p.Spec.NATOutgoing = true; p.Spec.Disabled = true }},

		{name: "missing cidr", mutate: func(p *api.IPPool) { p.Spec.CIDR = "" }, fields: []string{"spec.cidr"}, detail: "required"},
		{name: "not a cidr", mutate: func(p *api.IPPool) { p.Spec.CIDR = "ten.0.0.0/8" }, fields: []string{"spec.cidr"}},
		{name: "address without prefix", mutate: func(p *api.IPPool) { p.Spec.CIDR = "10.244.0.0" }, fields: []string{"spec.cidr"}},
		{name: "prefix too long", mutate: func(p *api.IPPool) { p.Spec.CIDR = "10.244.0.0/33" }, fields: []string{"spec.cidr"}},
		{name: "prefix too short", mutate: func(p *api.IPPool) { p.Spec.CIDR = "10.0.0.0/7"; p.Spec.BlockSize = 20 }, fields: []string{"spec.cidr"}, detail: "/8"},
		{name: "ipv6 pool", mutate: func(p *api.IPPool) { p.Spec.CIDR = "fd00:10:244::/48"; p.Spec.BlockSize = 122 }},
		{name: "ipv6 pool with vxlan", mutate: func(p *api.IPPool) {
			p.Spec.CIDR, p.Spec.BlockSize, p.Spec.VXLANMode = "fd00:10:244::/48", 122, api.EncapCrossSubnet
		}},
		{name: "ipv6 pool with ipv4 block size", mutate: func(p *api.IPPool) { p.Spec.CIDR = "fd00:10:244::/48" }, fields: []string{"spec.blockSize"}, detail: "between 116 and 128"},
		{name: "ipv6 block size 115", mutate: func(p *api.IPPool) { p.Spec.CIDR = "fd00:10:244::/48"; p.Spec.BlockSize = 115 }, fields: []string{"spec.blockSize"}, detail: "between 116 and 128"},
		{name: "ipv6 block larger than pool", mutate: func(p *api.IPPool) { p.Spec.CIDR = "fd00:10:244::/124"; p.Spec.BlockSize = 122 }, fields: []string{"spec.blockSize"}, detail: "larger than the pool"},
		{name: "ipv6 pool too wide", mutate: func(p *api.IPPool) { p.Spec.CIDR = "fd00::/8"; p.Spec.BlockSize = 122 }, fields: []string{"spec.cidr"}, detail: "/16 and /128"},
		{name: "ipv6 link-local pool", mutate: func(p *api.IPPool) { p.Spec.CIDR = "fe80::/64"; p.Spec.BlockSize = 122 }, fields: []string{"spec.cidr"}, detail: "link-local"},
		{name: "ipv6 multicast pool", mutate: func(p *api.IPPool) { p.Spec.CIDR = "ff05::/64"; p.Spec.BlockSize = 122 }, fields: []string{"spec.cidr"}, detail: "multicast"},
		{name: "ipv6 pool with ipip", mutate: func(p *api.IPPool) {
			p.Spec.CIDR = "fd00:10:244::/48"
			p.Spec.BlockSize = 122
			p.Spec.IPIPMode = api.EncapAlways
		}, fields: []string{"spec.ipipMode"}, detail: "IPv4 only"},
		{name: "ipv4-mapped ipv6 pool", mutate: func(p *api.IPPool) { p.Spec.CIDR = "::ffff:10.0.0.0/104" }, fields: []string{"spec.cidr"}},
		{name: "block size 19", mutate: func(p *api.IPPool) { p.Spec.BlockSize = 19 }, fields: []string{"spec.blockSize"}, detail: "between 20 and 32"},
		{name: "block size 33", mutate: func(p *api.IPPool) { p.Spec.BlockSize = 33 }, fields: []string{"spec.blockSize"}, detail: "between 20 and 32"},
		{name: "negative block size", mutate: func(p *api.IPPool) { p.Spec.BlockSize = -26 }, fields: []string{"spec.blockSize"}},
		{name: "block larger than pool", mutate: func(p *api.IPPool) { p.Spec.CIDR = "10.0.0.0/28"; p.Spec.BlockSize = 26 }, fields: []string{"spec.blockSize"}, detail: "larger than the pool"},
		{name: "unknown ipip mode", mutate: func(p *api.IPPool) { p.Spec.IPIPMode = "Sometimes" }, fields: []string{"spec.ipipMode"}, detail: "Never, Always, CrossSubnet"},
		{name: "ipip mode is case sensitive", mutate: func(p *api.IPPool) { p.Spec.IPIPMode = "always" }, fields: []string{"spec.ipipMode"}},
		{name: "empty ipip mode", mutate: func(p *api.IPPool) { p.Spec.IPIPMode = "" }, fields: []string{"spec.ipipMode"}},
		{name: "vxlan always", mutate: func(p *api.IPPool) { p.Spec.VXLANMode = api.EncapAlways }},
		{name: "vxlan cross-subnet", mutate: func(p *api.IPPool) { p.Spec.VXLANMode = api.EncapCrossSubnet }},
		{name: "ipip and vxlan", mutate: func(p *api.IPPool) { p.Spec.VXLANMode = api.EncapAlways; p.Spec.IPIPMode = api.EncapCrossSubnet }, fields: []string{"spec.vxlanMode"}, detail: "one encapsulation"},
		{name: "unknown vxlan mode", mutate: func(p *api.IPPool) { p.Spec.VXLANMode = "Maybe" }, fields: []string{"spec.vxlanMode"}},
		{name: "bad node selector", mutate: func(p *api.IPPool) { p.Spec.NodeSelector = "rack == " }, fields: []string{"spec.nodeSelector"}},
		{name: "unbalanced node selector", mutate: func(p *api.IPPool) { p.Spec.NodeSelector = "(has(rack)" }, fields: []string{"spec.nodeSelector"}},
		{name: "missing name", mutate: func(p *api.IPPool) { p.Metadata.Name = "" }, fields: []string{"metadata.name"}, detail: "required"},
		{name: "upper-case name", mutate: func(p *api.IPPool) { p.Metadata.Name = "Pool1" }, fields: []string{"metadata.name"}},
		{name: "name with slash", mutate: func(p *api.IPPool) { p.Metadata.Name = "a/b" }, fields: []string{"metadata.name"}},
		{name: "name starting with dash", mutate: func(p *api.IPPool) { p.Metadata.Name = "-a" }, fields: []string{"metadata.name"}},
		{name: "name too long", mutate: func(p *api.IPPool) { p.Metadata.Name = strings.Repeat("a", 254) }, fields: []string{"metadata.name"}, detail: "253"},
		{
			name: "every problem is reported at once",
			mutate: func(p *api.IPPool) {
				p.Metadata.Name = ""
				p.Spec.CIDR = "fd00::/8"
				p.Spec.BlockSize = 40
				p.Spec.IPIPMode = "x"
			},
			fields: []string{"metadata.name", "spec.cidr", "spec.blockSize", "spec.ipipMode"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := validPool()
			tt.mutate(p)
			err := p.Validate()
			checkValid(t, err, tt.fields...)
			checkDetail(t, err, tt.detail)
		})
	}
}

func TestIPPoolDefaults(t *testing.T) {
	t.Parallel()
	p := &api.IPPool{Metadata: api.ObjectMeta{Name: "p"}, Spec: api.IPPoolSpec{CIDR: "10.244.7.9/16"}}
	api.SetDefaults(p)
	want := api.IPPoolSpec{CIDR: "10.244.0.0/16", BlockSize: 26, IPIPMode: "Never", VXLANMode: "Never", NodeSelector: "all()"}
	if p.Spec != want {
		t.Fatalf("defaults: got %+v, want %+v", p.Spec, want)
	}
	p = &api.IPPool{Metadata: api.ObjectMeta{Name: "p6"}, Spec: api.IPPoolSpec{CIDR: "fd00:10:244::7/48"}}
	api.SetDefaults(p)
	want = api.IPPoolSpec{CIDR: "fd00:10:244::/48", BlockSize: 122, IPIPMode: "Never", VXLANMode: "Never", NodeSelector: "all()"}
	if p.Spec != want {
		t.Fatalf("IPv6 defaults: got %+v, want %+v", p.Spec, want)
	}
	// Explicit values are kept.
	p = &api.IPPool{Spec: api.IPPoolSpec{CIDR: "10.0.0.0/8", BlockSize: 24, IPIPMode: "Always", NodeSelector: "has(x)"}}
	api.SetDefaults(p)
	if p.Spec.BlockSize != 24 || p.Spec.IPIPMode != "Always" || p.Spec.NodeSelector != "has(x)" {
		t.Fatalf("defaults overwrote explicit values: %+v", p.Spec)
	}
}

func TestValidatePoolAgainst(t *testing.T) {
	t.Parallel()
	pool := func(name, cidr string) *api.IPPool {
		p := validPool()
		p.Metadata.Name = name
		p.Spec.CIDR = cidr
		return p
	}
	existing := []*api.IPPool{pool("a", "10.244.0.0/16"), pool("b", "192.168.0.0/24")}
	tests := []struct {
		name    string
		pool    *api.IPPool
		overlap string // name of the pool it must be reported against, "" if none
	}{
		{name: "disjoint", pool: pool("c", "10.245.0.0/16")},
		{name: "adjacent below", pool: pool("c", "10.243.0.0/16")},
		{name: "same name replaces itself", pool: pool("a", "10.244.0.0/16")},
		{name: "identical cidr", pool: pool("c", "10.244.0.0/16"), overlap: "a"},
		{name: "subset", pool: pool("c", "10.244.128.0/17"), overlap: "a"},
		{name: "superset", pool: pool("c", "10.0.0.0/8"), overlap: "a"},
		{name: "one block inside", pool: pool("c", "192.168.0.64/26"), overlap: "b"},
		{name: "renamed copy of b", pool: pool("a", "192.168.0.0/23"), overlap: "b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if err := tt.pool.Validate(); err != nil {
				t.Fatalf("test pool must be valid: %v", err)
			}
			err := api.ValidatePoolAgainst(tt.pool, existing)
			if tt.overlap == "" {
				checkValid(t, err)
				return
			}
			checkValid(t, err, "spec.cidr")
			checkDetail(t, err, `overlaps IPPool "`+tt.overlap+`"`)
		})
	}
	checkValid(t, api.ValidatePoolAgainst(pool("x", "10.0.0.0/8"), nil))

	// A pool's cidr and blockSize are fixed once it exists.
	err := api.ValidatePoolAgainst(pool("a", "10.244.0.0/17"), existing)
	checkValid(t, err, "spec.cidr")
	checkDetail(t, err, "cannot change once the pool exists")
	bigger := pool("a", "10.244.0.0/16")
	bigger.Spec.BlockSize = 24
	err = api.ValidatePoolAgainst(bigger, existing)
	checkValid(t, err, "spec.blockSize")
	checkDetail(t, err, `set disabled: true on "a"`)
}

func TestParseASNumber(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    api.ASNumber
		wantErr bool
	}{
		{in: "64512", want: 64512},
		{in: "1", want: 1},
		{in: "4294967294", want: 4294967294},
		{in: "1.10", want: 65546},
		{in: "0.1", want: 1},
		{in: "65535.65534", want: 4294967294},
		{in: "0", wantErr: true},
		{in: "-1", wantErr: true},
		{in: "4294967295", wantErr: true},
		{in: "70000000000", wantErr: true},
		{in: "99999999999999999999999", wantErr: true},
		{in: "abc", wantErr: true},
		{in: "", wantErr: true},
		{in: "1.", wantErr: true},
		{in: ".10", wantErr: true},
		{in: "1.65536", wantErr: true},
		{in: "65536.1", wantErr: true},
		{in: "1.2.3", wantErr: true},
		{in: "0.0", wantErr: true},
		{in: "65535.65535", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			got, err := api.ParseASNumber(tt.in)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("ParseASNumber(%q) = %d, want error", tt.in, got)
				}
				if !strings.Contains(err.Error(), "AS number") {
					t.Errorf("error should say it is about an AS number: %v", err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseASNumber(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestASNumberValidation(t *testing.T) {
	t.Parallel()
	tests := []struct {
		asn    api.ASNumber
		peerOK bool // BGPPeer.spec.asNumber is optional (peerIP of a node: its AS)
		nodeOK bool // Node.spec.bgp.asNumber is optional
	}{
		{asn: 0, peerOK: true, nodeOK: true},
		{asn: 1, peerOK: true, nodeOK: true},
		{asn: 64512, peerOK: true, nodeOK: true},
		{asn: 23456, peerOK: false, nodeOK: false}, // AS_TRANS
		{asn: 4294967294, peerOK: true, nodeOK: true},
		{asn: 4294967295, peerOK: false, nodeOK: false},
	}
	for _, tt := range tests {
		peer := validPeer()
		peer.Spec.ASNumber = tt.asn
		node := validNode()
		node.Spec.BGP.ASNumber = tt.asn
		conf := &api.BGPConfiguration{Metadata: api.ObjectMeta{Name: "node.n1"}, Spec: api.BGPConfigurationSpec{ASNumber: tt.asn}}
		if tt.peerOK {
			checkValid(t, peer.Validate())
		} else {
			checkValid(t, peer.Validate(), "spec.asNumber")
		}
		if tt.nodeOK {
			checkValid(t, node.Validate())
			checkValid(t, conf.Validate())
		} else {
			checkValid(t, node.Validate(), "spec.bgp.asNumber")
			checkValid(t, conf.Validate(), "spec.asNumber")
		}
	}
}

func validNode() *api.Node {
	return &api.Node{
		TypeMeta: api.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindNode},
		Metadata: api.ObjectMeta{Name: "node1", Labels: map[string]string{"rack": "r1"}},
		Spec:     api.NodeSpec{BGP: &api.NodeBGPSpec{IPv4Address: "10.0.0.5/24"}},
	}
}

func TestNodeValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		mutate func(n *api.Node)
		fields []string
	}{
		{name: "valid", mutate: func(n *api.Node) {}},
		{name: "no bgp", mutate: func(n *api.Node) { n.Spec.BGP = nil }},
		{name: "empty bgp", mutate: func(n *api.Node) { n.Spec.BGP = &api.NodeBGPSpec{} }},
		{name: "host route address", mutate: func(n *api.Node) { n.Spec.BGP.IPv4Address = "10.0.0.5/32" }},
		{name: "all fields", mutate: func(n *api.Node) {
			n.Spec.BGP = &api.NodeBGPSpec{IPv4Address: "10.0.0.5/24", ASNumber: 65001, RouteReflectorClusterID: "224.0.0.1", IPv4IPIPTunnelAddr: "10.244.3.1"}
		}},
		{name: "address without prefix", mutate: func(n *api.Node) { n.Spec.BGP.IPv4Address = "10.0.0.5" }, fields: []string{"spec.bgp.ipv4Address"}},
		{name: "ipv6 address", mutate: func(n *api.Node) { n.Spec.BGP.IPv4Address = "fd00::5/64" }, fields: []string{"spec.bgp.ipv4Address"}},
		{name: "garbage address", mutate: func(n *api.Node) { n.Spec.BGP.IPv4Address = "node1/24" }, fields: []string{"spec.bgp.ipv4Address"}},
		{name: "ipv6 node address", mutate: func(n *api.Node) { n.Spec.BGP.IPv6Address = "fd00:10::5/64" }},
		{name: "ipv6 address without prefix", mutate: func(n *api.Node) { n.Spec.BGP.IPv6Address = "fd00:10::5" }, fields: []string{"spec.bgp.ipv6Address"}},
		{name: "ipv4 in ipv6Address", mutate: func(n *api.Node) { n.Spec.BGP.IPv6Address = "10.0.0.5/24" }, fields: []string{"spec.bgp.ipv6Address"}},
		{name: "link-local ipv6Address", mutate: func(n *api.Node) { n.Spec.BGP.IPv6Address = "fe80::5/64" }, fields: []string{"spec.bgp.ipv6Address"}},
		{name: "bad cluster id", mutate: func(n *api.Node) { n.Spec.BGP.RouteReflectorClusterID = "cluster-1" }, fields: []string{"spec.bgp.routeReflectorClusterID"}},
		{name: "ipv6 cluster id", mutate: func(n *api.Node) { n.Spec.BGP.RouteReflectorClusterID = "::1" }, fields: []string{"spec.bgp.routeReflectorClusterID"}},
		{name: "tunnel address with prefix", mutate: func(n *api.Node) { n.Spec.BGP.IPv4IPIPTunnelAddr = "10.244.3.1/32" }, fields: []string{"spec.bgp.ipv4IPIPTunnelAddr"}},
		{name: "vxlan tunnel", mutate: func(n *api.Node) {
			n.Spec.IPv4VXLANTunnelAddr, n.Spec.VXLANTunnelMACAddr = "10.244.3.1", "66:da:0e:45:1c:2b"
		}},
		{name: "vxlan tunnel address with prefix", mutate: func(n *api.Node) { n.Spec.IPv4VXLANTunnelAddr = "10.244.3.1/32" }, fields: []string{"spec.ipv4VXLANTunnelAddr"}},
		{name: "bad vxlan mac", mutate: func(n *api.Node) { n.Spec.VXLANTunnelMACAddr = "66:da:0e" }, fields: []string{"spec.vxlanTunnelMACAddr"}},
		{name: "ipv6 vxlan tunnel", mutate: func(n *api.Node) {
			n.Spec.IPv6VXLANTunnelAddr, n.Spec.VXLANTunnelMACAddrV6 = "fd00:10:244::1", "66:da:0e:45:1c:2c"
		}},
		{name: "ipv4 in ipv6VXLANTunnelAddr", mutate: func(n *api.Node) { n.Spec.IPv6VXLANTunnelAddr = "10.244.3.1" }, fields: []string{"spec.ipv6VXLANTunnelAddr"}},
		{name: "bad ipv6 vxlan mac", mutate: func(n *api.Node) { n.Spec.VXLANTunnelMACAddrV6 = "66:da" }, fields: []string{"spec.vxlanTunnelMACAddrV6"}},
		{name: "bad label key", mutate: func(n *api.Node) { n.Metadata.Labels = map[string]string{"bad key": "v"} }, fields: []string{"metadata.labels"}},
		{name: "bad label value", mutate: func(n *api.Node) { n.Metadata.Labels = map[string]string{"k": "bad value"} }, fields: []string{"metadata.labels.k"}},
		{name: "bad name", mutate: func(n *api.Node) { n.Metadata.Name = "Node_1" }, fields: []string{"metadata.name"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			n := validNode()
			tt.mutate(n)
			checkValid(t, n.Validate(), tt.fields...)
		})
	}
}

func TestNodeAddress(t *testing.T) {
	t.Parallel()
	n := validNode()
	if p, ok := n.Address(); !ok || p.String() != "10.0.0.5/24" {
		t.Fatalf("Address() = %v, %v", p, ok)
	}
	n.Spec.BGP.IPv4Address = "10.0.0.5"
	if _, ok := n.Address(); ok {
		t.Fatal("an address without prefix length must not be usable")
	}
	n.Spec.BGP = nil
	if _, ok := n.Address(); ok {
		t.Fatal("a node without BGP spec has no address")
	}
}

func TestLabelValidation(t *testing.T) {
	t.Parallel()
	tests := []struct {
		key, value string
		field      string // "" when valid
	}{
		{key: "app", value: "web"},
		{key: "kubernetes.io/hostname", value: "node-1.example"},
		{key: "a.b-c/D_e.F", value: "X_y-z.1"},
		{key: "k", value: ""},
		{key: "A", value: strings.Repeat("v", 63)},
		{key: "", value: "v", field: "metadata.labels"},
		{key: "-app", value: "v", field: "metadata.labels"},
		{key: "app-", value: "v", field: "metadata.labels"},
		{key: "a/b/c", value: "v", field: "metadata.labels"},
		{key: "Example.com/x", value: "v", field: "metadata.labels"},
		{key: "/x", value: "v", field: "metadata.labels"},
		{key: "a b", value: "v", field: "metadata.labels"},
		{key: "app", value: "a b", field: "metadata.labels.app"},
		{key: "app", value: "-v", field: "metadata.labels.app"},
		{key: "app", value: "v_", field: "metadata.labels.app"},
		{key: "app", value: "a/b", field: "metadata.labels.app"},
		{key: "app", value: strings.Repeat("v", 64), field: "metadata.labels.app"},
	}
	for _, tt := range tests {
		t.Run(tt.key+"="+tt.value, func(t *testing.T) {
			t.Parallel()
			labels := map[string]string{tt.key: tt.value}
			n := validNode()
			n.Metadata.Labels = labels
			w := validWEP()
			w.Metadata.Labels = labels
			if tt.field == "" {
				checkValid(t, n.Validate())
				checkValid(t, w.Validate())
				return
			}
			checkValid(t, n.Validate(), tt.field)
			checkValid(t, w.Validate(), tt.field)
		})
	}
}

func validBGPConfig() *api.BGPConfiguration {
	c := &api.BGPConfiguration{
		TypeMeta: api.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindBGPConfiguration},
		Metadata: api.ObjectMeta{Name: "default"},
	}
	api.SetDefaults(c)
	return c
}

func TestBGPConfigurationValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		mutate func(c *api.BGPConfiguration)
		fields []string
		detail string
	}{
		{name: "default", mutate: func(c *api.BGPConfiguration) {}},
		{name: "per-node", mutate: func(c *api.BGPConfiguration) { c.Metadata.Name = "node.worker-1" }},
		{name: "timers", mutate: func(c *api.BGPConfiguration) { c.Spec.KeepaliveTime = "30s"; c.Spec.HoldTime = "90s" }},
		{name: "minimal hold", mutate: func(c *api.BGPConfiguration) { c.Spec.KeepaliveTime = "1s"; c.Spec.HoldTime = "3s" }},
		{name: "hold zero disables keepalives", mutate: func(c *api.BGPConfiguration) { c.Spec.KeepaliveTime = "1m"; c.Spec.HoldTime = "0s" }},
		{name: "only keepalive", mutate: func(c *api.BGPConfiguration) { c.Spec.KeepaliveTime = "10s" }},
		{name: "log severity any case", mutate: func(c *api.BGPConfiguration) { c.Spec.LogSeverity = "debug" }},
		{name: "service cluster ips", mutate: func(c *api.BGPConfiguration) {
			c.Spec.ServiceClusterIPs = []api.ServiceClusterIP{{CIDR: "10.96.0.0/12"}}
		}},

		{name: "other name", mutate: func(c *api.BGPConfiguration) { c.Metadata.Name = "global" }, fields: []string{"metadata.name"}, detail: "node.<nodename>"},
		{name: "node prefix without node", mutate: func(c *api.BGPConfiguration) { c.Metadata.Name = "node." }, fields: []string{"metadata.name"}},
		{name: "bad keepalive", mutate: func(c *api.BGPConfiguration) { c.Spec.KeepaliveTime = "often" }, fields: []string{"spec.keepaliveTime"}},
		{name: "duration without unit", mutate: func(c *api.BGPConfiguration) { c.Spec.HoldTime = "90" }, fields: []string{"spec.holdTime"}},
		{name: "negative hold", mutate: func(c *api.BGPConfiguration) { c.Spec.HoldTime = "-10s" }, fields: []string{"spec.holdTime"}},
		{name: "hold under 3s", mutate: func(c *api.BGPConfiguration) { c.Spec.HoldTime = "2s" }, fields: []string{"spec.holdTime"}, detail: "at least 3s"},
		{name: "hold 2999ms", mutate: func(c *api.BGPConfiguration) { c.Spec.HoldTime = "2999ms" }, fields: []string{"spec.holdTime"}},
		{name: "keepalive over hold/3", mutate: func(c *api.BGPConfiguration) { c.Spec.KeepaliveTime = "31s"; c.Spec.HoldTime = "90s" }, fields: []string{"spec.keepaliveTime"}, detail: "third of holdTime"},
		{name: "keepalive over hold", mutate: func(c *api.BGPConfiguration) { c.Spec.KeepaliveTime = "2m"; c.Spec.HoldTime = "1m" }, fields: []string{"spec.keepaliveTime"}},
		{name: "ipv6 service cidrs", mutate: func(c *api.BGPConfiguration) {
			c.Spec.ServiceClusterIPs = []api.ServiceClusterIP{{CIDR: "10.96.0.0/12"}, {CIDR: "fd00:96::/108"}}
			c.Spec.ServiceExternalIPs = []api.ServiceClusterIP{{CIDR: "2001:db8:e::/64"}}
			c.Spec.ServiceLoadBalancerIPs = []api.ServiceClusterIP{{CIDR: "2001:db8:1b::/64"}}
			c.Spec.PrefixAdvertisements = []api.PrefixAdvertisement{{CIDR: "fd00:65::/48", Communities: []string{"65001:1"}}}
		}},
		{name: "ipv4-mapped service cidr", mutate: func(c *api.BGPConfiguration) {
			c.Spec.ServiceExternalIPs = []api.ServiceClusterIP{{CIDR: "::ffff:10.96.0.0/108"}}
			c.Spec.PrefixAdvertisements = []api.PrefixAdvertisement{{CIDR: "fe80::1%eth0/64"}}
		}, fields: []string{"spec.serviceExternalIPs[0].cidr", "spec.prefixAdvertisements[0].cidr"}},
		{name: "service ip without prefix", mutate: func(c *api.BGPConfiguration) {
			c.Spec.ServiceClusterIPs = []api.ServiceClusterIP{{CIDR: "10.96.0.1"}}
		}, fields: []string{"spec.serviceClusterIPs[0].cidr"}},
		{name: "log severity", mutate: func(c *api.BGPConfiguration) { c.Spec.LogSeverity = "Verbose" }, fields: []string{"spec.logSeverity"}},
		{name: "as trans", mutate: func(c *api.BGPConfiguration) { c.Spec.ASNumber = 23456 }, fields: []string{"spec.asNumber"}},
		{name: "workload peering ips", mutate: func(c *api.BGPConfiguration) {
			c.Spec.LocalWorkloadPeeringIPV4, c.Spec.LocalWorkloadPeeringIPV6 = "169.254.0.179", "fe80::179"
		}},
		{name: "workload peering ips swapped", mutate: func(c *api.BGPConfiguration) {
			c.Spec.LocalWorkloadPeeringIPV4, c.Spec.LocalWorkloadPeeringIPV6 = "fe80::179", "169.254.0.179"
		}, fields: []string{"spec.localWorkloadPeeringIPV4", "spec.localWorkloadPeeringIPV6"}, detail: "is not an IPv4 address"},
		{name: "workload peering ip with prefix", mutate: func(c *api.BGPConfiguration) { c.Spec.LocalWorkloadPeeringIPV4 = "169.254.0.179/32" },
			fields: []string{"spec.localWorkloadPeeringIPV4"}},
		{name: "workload peering ip multicast", mutate: func(c *api.BGPConfiguration) { c.Spec.LocalWorkloadPeeringIPV4 = "224.0.0.1" },
			fields: []string{"spec.localWorkloadPeeringIPV4"}, detail: "unicast"},
		{name: "workload peering ip unspecified", mutate: func(c *api.BGPConfiguration) { c.Spec.LocalWorkloadPeeringIPV6 = "::" },
			fields: []string{"spec.localWorkloadPeeringIPV6"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := validBGPConfig()
			tt.mutate(c)
			err := c.Validate()
			checkValid(t, err, tt.fields...)
			checkDetail(t, err, tt.detail)
		})
	}
}

func TestBGPConfigurationDefaults(t *testing.T) {
	t.Parallel()
	c := validBGPConfig()
	if c.Spec.ASNumber != api.DefaultASNumber || c.Spec.ListenPort != 179 || !c.MeshEnabled() || c.Spec.NodeToNodeMeshEnabled == nil {
		t.Fatalf("default BGPConfiguration: %+v", c.Spec)
	}
	off := false
	c = &api.BGPConfiguration{Metadata: api.ObjectMeta{Name: "default"}, Spec: api.BGPConfigurationSpec{NodeToNodeMeshEnabled: &off, ASNumber: 65001}}
	api.SetDefaults(c)
	if c.MeshEnabled() || c.Spec.ASNumber != 65001 {
		t.Fatalf("explicit values must survive defaults: %+v", c.Spec)
	}
	// A per-node override must not get cluster defaults, or it would
	// override the cluster-wide values with them.
	c = &api.BGPConfiguration{Metadata: api.ObjectMeta{Name: "node.n1"}}
	api.SetDefaults(c)
	if c.Spec.ASNumber != 0 || c.Spec.ListenPort != 0 || c.Spec.NodeToNodeMeshEnabled != nil {
		t.Fatalf("per-node BGPConfiguration got defaults: %+v", c.Spec)
	}
}

func validPeer() *api.BGPPeer {
	p := &api.BGPPeer{
		TypeMeta: api.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindBGPPeer},
		Metadata: api.ObjectMeta{Name: "tor"},
		Spec:     api.BGPPeerSpec{PeerIP: "10.0.0.1", ASNumber: 65001},
	}
	api.SetDefaults(p)
	return p
}

func TestBGPPeerValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		mutate func(p *api.BGPPeer)
		fields []string
	}{
		{name: "global peer", mutate: func(p *api.BGPPeer) {}},
		{name: "peer of one node", mutate: func(p *api.BGPPeer) { p.Spec.Node = "node1" }},
		{name: "peer of selected nodes", mutate: func(p *api.BGPPeer) { p.Spec.NodeSelector = "rack == 'r1'" }},
		{name: "peer selector", mutate: func(p *api.BGPPeer) {
			p.Spec.PeerIP, p.Spec.ASNumber = "", 0
			p.Spec.PeerSelector = "has(route-reflector)"
		}},
		{name: "source none", mutate: func(p *api.BGPPeer) { p.Spec.SourceAddress = api.SourceNone }},
		{name: "password file", mutate: func(p *api.BGPPeer) { p.Spec.Password = &api.PasswordSource{File: "/etc/routed/pw"} }},
		{name: "password secret", mutate: func(p *api.BGPPeer) {
			p.Spec.Password = &api.PasswordSource{SecretKeyRef: &api.SecretKeyRef{Name: "bgp", Key: "pw"}}
		}},
		{name: "timers", mutate: func(p *api.BGPPeer) { p.Spec.KeepaliveTime = "10s"; p.Spec.HoldTime = "30s" }},

		{name: "peer selector with peer ip", mutate: func(p *api.BGPPeer) { p.Spec.ASNumber = 0; p.Spec.PeerSelector = "all()" }, fields: []string{"spec.peerSelector"}},
		{name: "peer selector with as number", mutate: func(p *api.BGPPeer) { p.Spec.PeerIP = ""; p.Spec.PeerSelector = "all()" }, fields: []string{"spec.peerSelector"}},
		{name: "peer selector with both", mutate: func(p *api.BGPPeer) { p.Spec.PeerSelector = "all()" }, fields: []string{"spec.peerSelector"}},
		{name: "neither peer ip nor selector", mutate: func(p *api.BGPPeer) { p.Spec.PeerIP = "" }, fields: []string{"spec.peerIP"}},
		// As Calico: a peerIP that is a node's address peers with that node at its AS.
		{name: "peer ip without as number", mutate: func(p *api.BGPPeer) { p.Spec.ASNumber = 0 }},
		{name: "ipv6 peer", mutate: func(p *api.BGPPeer) { p.Spec.PeerIP = "fd00::1" }},
		{name: "ipv6 peer with port", mutate: func(p *api.BGPPeer) { p.Spec.PeerIP = "[fd00::1]:1179" }},
		{name: "link-local ipv6 peer with zone", mutate: func(p *api.BGPPeer) { p.Spec.PeerIP = "fe80::1%eth0" }, fields: []string{"spec.peerIP"}},
		{name: "peer ip with port (Calico's IP:port)", mutate: func(p *api.BGPPeer) { p.Spec.PeerIP = "10.0.0.1:1179" }},
		{name: "peer ip with a bad port", mutate: func(p *api.BGPPeer) { p.Spec.PeerIP = "10.0.0.1:99999" }, fields: []string{"spec.peerIP"}},
		{name: "empty filter name", mutate: func(p *api.BGPPeer) { p.Spec.Filters = []string{""} }, fields: []string{"spec.filters[0]"}},
		{name: "too many own AS numbers", mutate: func(p *api.BGPPeer) { p.Spec.NumAllowedLocalASNumbers = 11 }, fields: []string{"spec.numAllowedLocalASNumbers"}},
		{name: "unknown reversePeering", mutate: func(p *api.BGPPeer) { p.Spec.ReversePeering = "Sometimes" }, fields: []string{"spec.reversePeering"}},
		{name: "reserved local AS", mutate: func(p *api.BGPPeer) { p.Spec.LocalASNumber = 23456 }, fields: []string{"spec.localASNumber"}},
		{name: "bad restart time", mutate: func(p *api.BGPPeer) { p.Spec.MaxRestartTime = "soon" }, fields: []string{"spec.maxRestartTime"}},
		{name: "local workloads", mutate: func(p *api.BGPPeer) {
			p.Spec.PeerIP, p.Spec.LocalWorkloadSelector, p.Spec.LocalASNumber = "", "app == 'router'", 65002
			p.Spec.NodeSelector, p.Spec.Filters = "rack == 'r1'", []string{"f"}
		}},
		{name: "local workloads with peer ip", mutate: func(p *api.BGPPeer) { p.Spec.LocalWorkloadSelector = "all()" },
			fields: []string{"spec.localWorkloadSelector"}},
		{name: "local workloads with peer selector", mutate: func(p *api.BGPPeer) {
			p.Spec.PeerIP, p.Spec.PeerSelector, p.Spec.LocalWorkloadSelector = "", "all()", "all()"
		}, fields: []string{"spec.localWorkloadSelector"}},
		{name: "local workloads without as number", mutate: func(p *api.BGPPeer) {
			p.Spec.PeerIP, p.Spec.ASNumber, p.Spec.LocalWorkloadSelector = "", 0, "all()"
		}, fields: []string{"spec.asNumber"}},
		{name: "bad local workload selector", mutate: func(p *api.BGPPeer) { p.Spec.PeerIP, p.Spec.LocalWorkloadSelector = "", "app ==" },
			fields: []string{"spec.localWorkloadSelector"}},
		{name: "local workloads with reachable by", mutate: func(p *api.BGPPeer) {
			p.Spec.PeerIP, p.Spec.LocalWorkloadSelector, p.Spec.ReachableBy = "", "all()", "10.0.0.254"
		}, fields: []string{"spec.reachableBy"}},
		{name: "peer ip with prefix", mutate: func(p *api.BGPPeer) { p.Spec.PeerIP = "10.0.0.1/32" }, fields: []string{"spec.peerIP"}},
		{name: "node and node selector", mutate: func(p *api.BGPPeer) { p.Spec.Node = "n1"; p.Spec.NodeSelector = "all()" }, fields: []string{"spec.nodeSelector"}},
		{name: "bad node selector", mutate: func(p *api.BGPPeer) { p.Spec.NodeSelector = "rack ==" }, fields: []string{"spec.nodeSelector"}},
		{name: "bad peer selector", mutate: func(p *api.BGPPeer) {
			p.Spec.PeerIP, p.Spec.ASNumber = "", 0
			p.Spec.PeerSelector = "has(rr"
		}, fields: []string{"spec.peerSelector"}},
		{name: "bad source address", mutate: func(p *api.BGPPeer) { p.Spec.SourceAddress = "10.0.0.9" }, fields: []string{"spec.sourceAddress"}},
		{name: "password both", mutate: func(p *api.BGPPeer) {
			p.Spec.Password = &api.PasswordSource{File: "/pw", SecretKeyRef: &api.SecretKeyRef{Name: "a", Key: "b"}}
		}, fields: []string{"spec.password"}},
		{name: "password neither", mutate: func(p *api.BGPPeer) { p.Spec.Password = &api.PasswordSource{} }, fields: []string{"spec.password"}},
		{name: "secret without key", mutate: func(p *api.BGPPeer) {
			p.Spec.Password = &api.PasswordSource{SecretKeyRef: &api.SecretKeyRef{Name: "bgp"}}
		}, fields: []string{"spec.password.secretKeyRef"}},
		{name: "secret without name", mutate: func(p *api.BGPPeer) {
			p.Spec.Password = &api.PasswordSource{SecretKeyRef: &api.SecretKeyRef{Key: "pw"}}
		}, fields: []string{"spec.password.secretKeyRef"}},
		{name: "bad keepalive", mutate: func(p *api.BGPPeer) { p.Spec.KeepaliveTime = "1 minute" }, fields: []string{"spec.keepaliveTime"}},
		{name: "bad hold", mutate: func(p *api.BGPPeer) { p.Spec.HoldTime = "x" }, fields: []string{"spec.holdTime"}},
		{name: "hold under 3s", mutate: func(p *api.BGPPeer) { p.Spec.HoldTime = "1s" }, fields: []string{"spec.holdTime"}},
		{name: "keepalive over hold/3", mutate: func(p *api.BGPPeer) { p.Spec.KeepaliveTime = "20s"; p.Spec.HoldTime = "30s" }, fields: []string{"spec.keepaliveTime"}},
		{name: "bad name", mutate: func(p *api.BGPPeer) { p.Metadata.Name = "ToR" }, fields: []string{"metadata.name"}},
		// As Calico: accepted; confd warns that no session can reach it.
		{name: "multicast peer", mutate: func(p *api.BGPPeer) { p.Spec.PeerIP = "ffee::11" }},
		{name: "reachable by", mutate: func(p *api.BGPPeer) { p.Spec.ReachableBy = "10.0.0.254" }},
		{name: "reachable by ipv6", mutate: func(p *api.BGPPeer) { p.Spec.PeerIP, p.Spec.ReachableBy = "[fd00::1]:1179", "fd00::fe" }},
		{name: "reachable by, multicast peer and gateway", mutate: func(p *api.BGPPeer) { p.Spec.PeerIP, p.Spec.ReachableBy = "ffee::10", "ffee::1:1" }},
		{name: "reachable by another family", mutate: func(p *api.BGPPeer) { p.Spec.ReachableBy = "fd00::fe" }, fields: []string{"spec.reachableBy"}},
		{name: "reachable by a prefix", mutate: func(p *api.BGPPeer) { p.Spec.ReachableBy = "10.0.0.0/24" }, fields: []string{"spec.reachableBy"}},
		{name: "reachable by multicast", mutate: func(p *api.BGPPeer) { p.Spec.ReachableBy = "224.0.0.5" }, fields: []string{"spec.reachableBy"}},
		{name: "reachable by itself", mutate: func(p *api.BGPPeer) { p.Spec.ReachableBy = "10.0.0.1" }, fields: []string{"spec.reachableBy"}},
		{name: "reachable by without peer ip", mutate: func(p *api.BGPPeer) {
			p.Spec.PeerIP, p.Spec.ASNumber = "", 0
			p.Spec.PeerSelector, p.Spec.ReachableBy = "all()", "10.0.0.254"
		}, fields: []string{"spec.reachableBy"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := validPeer()
			tt.mutate(p)
			checkValid(t, p.Validate(), tt.fields...)
		})
	}
}

func validWEP() *api.WorkloadEndpoint {
	w := &api.WorkloadEndpoint{
		TypeMeta: api.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindWorkloadEndpoint},
		Metadata: api.ObjectMeta{Name: "node1-k8s-default-web--0-eth0"},
		Spec: api.WorkloadEndpointSpec{
			Node: "node1", Namespace: "default", Pod: "web-0", ContainerID: "abc123",
			InterfaceName: "cali1234", IPNetworks: []string{"10.244.1.5/32"},
		},
	}
	api.SetDefaults(w)
	return w
}

func TestWorkloadEndpointValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		mutate func(w *api.WorkloadEndpoint)
		fields []string
	}{
		{name: "valid", mutate: func(w *api.WorkloadEndpoint) {}},
		{name: "no addresses yet", mutate: func(w *api.WorkloadEndpoint) { w.Spec.IPNetworks = nil }},
		{name: "missing node", mutate: func(w *api.WorkloadEndpoint) { w.Spec.Node = "" }, fields: []string{"spec.node"}},
		{name: "missing container id", mutate: func(w *api.WorkloadEndpoint) { w.Spec.ContainerID = "" }, fields: []string{"spec.containerID"}},
		{name: "missing interface", mutate: func(w *api.WorkloadEndpoint) { w.Spec.InterfaceName = "" }, fields: []string{"spec.interfaceName"}},
		{name: "all required missing", mutate: func(w *api.WorkloadEndpoint) { w.Spec = api.WorkloadEndpointSpec{} }, fields: []string{"spec.node", "spec.containerID", "spec.interfaceName"}},
		{name: "address without prefix", mutate: func(w *api.WorkloadEndpoint) { w.Spec.IPNetworks = []string{"10.244.1.5/32", "10.244.1.6"} }, fields: []string{"spec.ipNetworks[1]"}},
		{name: "host interface", mutate: func(w *api.WorkloadEndpoint) { w.Spec.InterfaceName = "eth0" }, fields: []string{"spec.interfaceName"}},
		{name: "loopback", mutate: func(w *api.WorkloadEndpoint) { w.Spec.InterfaceName = "lo" }, fields: []string{"spec.interfaceName"}},
		{name: "prefix alone", mutate: func(w *api.WorkloadEndpoint) { w.Spec.InterfaceName = "cali" }, fields: []string{"spec.interfaceName"}},
		{name: "interface name too long", mutate: func(w *api.WorkloadEndpoint) { w.Spec.InterfaceName = "cali0123456789ab" }, fields: []string{"spec.interfaceName"}},
		{name: "interface name with a slash", mutate: func(w *api.WorkloadEndpoint) { w.Spec.InterfaceName = "cali/../eth0" }, fields: []string{"spec.interfaceName"}},
		{name: "interface name with a colon", mutate: func(w *api.WorkloadEndpoint) { w.Spec.InterfaceName = "cali:1" }, fields: []string{"spec.interfaceName"}},
		{name: "interface name with a template", mutate: func(w *api.WorkloadEndpoint) { w.Spec.InterfaceName = "cali%d" }, fields: []string{"spec.interfaceName"}},
		{name: "longest pod device", mutate: func(w *api.WorkloadEndpoint) { w.Spec.InterfaceName = "cali0123456789a" }},
		{name: "bad label", mutate: func(w *api.WorkloadEndpoint) { w.Metadata.Labels = map[string]string{"app": "no spaces"} }, fields: []string{"metadata.labels.app"}},
		{name: "missing name", mutate: func(w *api.WorkloadEndpoint) { w.Metadata.Name = "" }, fields: []string{"metadata.name"}},
		{name: "named for another node", mutate: func(w *api.WorkloadEndpoint) { w.Metadata.Name = "node2-k8s-default-web--0-eth0" }, fields: []string{"metadata.name"}},
		{name: "named for a node with a longer name", mutate: func(w *api.WorkloadEndpoint) { w.Metadata.Name = "node1--b-k8s-default-web--0-eth0" }, fields: []string{"metadata.name"}},
		{name: "named freely", mutate: func(w *api.WorkloadEndpoint) { w.Metadata.Name = "web" }, fields: []string{"metadata.name"}},
		{name: "node with dashes", mutate: func(w *api.WorkloadEndpoint) {
			w.Spec.Node, w.Metadata.Name = "node-1", "node--1-k8s-default-web--0-eth0"
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w := validWEP()
			tt.mutate(w)
			checkValid(t, w.Validate(), tt.fields...)
		})
	}
}

func TestWorkloadEndpointName(t *testing.T) {
	t.Parallel()
	tests := []struct {
		node, orch, ns, pod, cid, iface string
		want                            string
	}{
		{"node1", "k8s", "default", "web-0", "abc", "eth0", "node1-k8s-default-web--0-eth0"},
		{"node1", "cni", "", "", "abc", "eth0", "node1-cni--abc-eth0"},
		{"n-1", "k8s", "kube-system", "dns", "x", "eth0", "n--1-k8s-kube--system-dns-eth0"},
	}
	for _, tt := range tests {
		got := api.WorkloadEndpointName(tt.node, tt.orch, tt.ns, tt.pod, tt.cid, tt.iface)
		if got != tt.want {
			t.Errorf("WorkloadEndpointName(%q, %q, %q, %q, %q, %q) = %q, want %q", tt.node, tt.orch, tt.ns, tt.pod, tt.cid, tt.iface, got, tt.want)
		}
	}
	// Dashes are doubled so distinct inputs cannot collide.
	a := api.WorkloadEndpointName("a-b", "k8s", "c", "d", "", "eth0")
	b := api.WorkloadEndpointName("a", "k8s", "b-c", "d", "", "eth0")
	if a == b {
		t.Fatalf("names collide: %q", a)
	}
}

func TestIPAMConfigurationValidate(t *testing.T) {
	t.Parallel()
	ok := &api.IPAMConfiguration{Metadata: api.ObjectMeta{Name: "default"}, Spec: api.IPAMConfigurationSpec{MaxBlocksPerHost: 4}}
	checkValid(t, ok.Validate())
	if !ok.AutoAllocate() {
		t.Error("AutoAllocate must default to true")
	}
	checkValid(t, (&api.IPAMConfiguration{Metadata: api.ObjectMeta{Name: "other"}}).Validate(), "metadata.name")
	checkValid(t, (&api.IPAMConfiguration{Metadata: api.ObjectMeta{Name: "default"}, Spec: api.IPAMConfigurationSpec{MaxBlocksPerHost: -1}}).Validate(), "spec.maxBlocksPerHost")
}

func TestParseKind(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want api.Kind
	}{
		{"ippool", api.KindIPPool}, {"IPPools", api.KindIPPool}, {"pool", api.KindIPPool},
		{"node", api.KindNode}, {"Nodes", api.KindNode},
		{"bgpconfig", api.KindBGPConfiguration}, {"bgpconfigurations", api.KindBGPConfiguration},
		{"BGPPeer", api.KindBGPPeer}, {"bgppeers", api.KindBGPPeer},
		{"wep", api.KindWorkloadEndpoint}, {"workloadendpoints", api.KindWorkloadEndpoint},
		{"ipamconfig", api.KindIPAMConfiguration}, {"IPAMConfiguration", api.KindIPAMConfiguration},
	}
	for _, tt := range tests {
		if got, err := api.ParseKind(tt.in); err != nil || got != tt.want {
			t.Errorf("ParseKind(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
	if _, err := api.ParseKind("kubecontrollersconfiguration"); !errors.Is(err, api.ErrUnknownKind) {
		t.Errorf("ParseKind(kubecontrollersconfiguration): want ErrUnknownKind, got %v", err)
	}
	for _, k := range api.Kinds {
		r, err := api.New(k)
		if err != nil || r.GetKind() != k {
			t.Errorf("New(%s) = %v, %v", k, r, err)
		}
	}
	if _, err := api.New("Pod"); !errors.Is(err, api.ErrUnknownKind) {
		t.Errorf("New(Pod): want ErrUnknownKind, got %v", err)
	}
}

func TestPoolRefusesReservedRanges(t *testing.T) {
	t.Parallel()
	for _, cidr := range []string{"127.0.0.0/16", "169.254.0.0/16", "169.0.0.0/8", "224.1.0.0/16", "0.0.0.0/8", "240.0.0.0/8"} {
		p := validPool()
		p.Spec.CIDR = cidr
		err := p.Validate()
		checkValid(t, err, "spec.cidr")
		checkDetail(t, err, "overlaps")
	}
	p := validPool()
	p.Spec.CIDR = "10.244.0.0/16"
	checkValid(t, p.Validate())
}

func TestCommunities(t *testing.T) {
	t.Parallel()
	c := &api.BGPConfiguration{Metadata: api.ObjectMeta{Name: "default"}, Spec: api.BGPConfigurationSpec{
		LogSeverity:          "Info",
		Communities:          []api.Community{{Name: "ok", Value: "65001:100"}, {Name: "big", Value: "4200000000:1:2"}},
		PrefixAdvertisements: []api.PrefixAdvertisement{{CIDR: "10.65.0.0/16", Communities: []string{"ok", "big", "1:2"}}},
	}}
	checkValid(t, c.Validate())
	if got := c.CommunityValues([]string{"ok", "1:2"}); len(got) != 2 || got[0] != "65001:100" || got[1] != "1:2" {
		t.Errorf("CommunityValues = %v", got)
	}
	c.Spec.Communities = append(c.Spec.Communities, api.Community{Name: "bad", Value: "70000:1"})
	c.Spec.PrefixAdvertisements = append(c.Spec.PrefixAdvertisements, api.PrefixAdvertisement{CIDR: "10.0.0.0/8", Communities: []string{"nope"}})
	checkValid(t, c.Validate(), "spec.communities[2]", "spec.prefixAdvertisements[1].communities")
}

func TestBGPFilterValidate(t *testing.T) {
	t.Parallel()
	f := &api.BGPFilter{Metadata: api.ObjectMeta{Name: "f"}, Spec: api.BGPFilterSpec{
		ImportV4: []api.BGPFilterRule{{Action: "Reject", MatchOperator: "In", CIDR: "192.168.0.0/16"}, {Action: "Accept"}},
		ExportV6: []api.BGPFilterRule{{Action: "Accept", MatchOperator: "Equal", CIDR: "fd00::/64"}},
	}}
	checkValid(t, f.Validate())
	f.Spec.ExportV4 = []api.BGPFilterRule{{Action: "Drop", MatchOperator: "Like", CIDR: "fd00::/64"}, {Action: "Accept", CIDR: "10.0.0.0/8"}}
	checkValid(t, f.Validate(), "spec.exportV4[0].action", "spec.exportV4[0].cidr", "spec.exportV4[0].matchOperator", "spec.exportV4[1]")
}

// TestBGPFilterRuleFields: Calico's newer rule fields, valid and not.
func TestBGPFilterRuleFields(t *testing.T) {
	t.Parallel()
	lo, hi := int32(16), int32(24)
	f := &api.BGPFilter{Metadata: api.ObjectMeta{Name: "f"}, Spec: api.BGPFilterSpec{
		ExportV4: []api.BGPFilterRule{{Action: "Accept", Source: "RemotePeers", PeerType: "eBGP", Interface: "*.calico",
			MatchOperator: "In", CIDR: "10.0.0.0/8", PrefixLength: &api.BGPFilterPrefixLength{Min: &lo, Max: &hi},
			Communities: &api.BGPFilterCommunities{Values: []string{"65000:1"}}, ASPathPrefix: []api.ASNumber{65000},
			Operations: []api.BGPFilterOperation{{AddCommunity: &api.BGPFilterAddCommunity{Value: "65000:1:2"}},
				{PrependASPath: &api.BGPFilterPrependASPath{Prefix: []api.ASNumber{65001, 65001}}}}}},
	}}
	checkValid(t, f.Validate())
	big := int32(40)
	f.Spec.ImportV4 = []api.BGPFilterRule{
		{Action: "Reject", Source: "Local", PeerType: "external", Operations: []api.BGPFilterOperation{{}}, Interface: "eth0/1"},
		{Action: "Accept", PrefixLength: &api.BGPFilterPrefixLength{Max: &hi}},
		{Action: "Accept", MatchOperator: "In", CIDR: "10.0.0.0/8", PrefixLength: &api.BGPFilterPrefixLength{Max: &big},
			Communities: &api.BGPFilterCommunities{Values: []string{"1:2", "3:4"}}, ASPathPrefix: []api.ASNumber{0},
			Operations: []api.BGPFilterOperation{{AddCommunity: &api.BGPFilterAddCommunity{Value: "70000:1"}},
				{PrependASPath: &api.BGPFilterPrependASPath{}}}},
	}
	checkValid(t, f.Validate(), "spec.importV4[0].source", "spec.importV4[0].peerType", "spec.importV4[0].operations", "spec.importV4[0].interface",
		"spec.importV4[0].operations[0]", "spec.importV4[1].prefixLength", "spec.importV4[2].prefixLength",
		"spec.importV4[2].communities.values", "spec.importV4[2].asPathPrefix[0]",
		"spec.importV4[2].operations[0].addCommunity.value", "spec.importV4[2].operations[1].prependASPath.prefix")
}

// A node's endpoint names are a key range of their own: node a's never
// include node a-b's, though "a-" starts "a--b-".
func TestIsNodeWorkloadEndpointName(t *testing.T) {
	for _, c := range []struct {
		name, node string
		want       bool
	}{
		{api.WorkloadEndpointName("a", "k8s", "ns", "pod", "", "eth0"), "a", true},
		{api.WorkloadEndpointName("a-b", "k8s", "ns", "pod", "", "eth0"), "a", false},
		{api.WorkloadEndpointName("a-b", "k8s", "ns", "pod", "", "eth0"), "a-b", true},
		{api.WorkloadEndpointName("ab", "k8s", "ns", "pod", "", "eth0"), "a", false},
	} {
		if got := api.IsNodeWorkloadEndpointName(c.name, c.node); got != c.want {
			t.Errorf("IsNodeWorkloadEndpointName(%q, %q) = %v, want %v", c.name, c.node, got, c.want)
		}
	}
}

// An endpoint's node is read back from its name, for every node name a
// dash can be doubled in, and a name without a node part says so.
func TestWorkloadEndpointNode(t *testing.T) {
	for _, node := range []string{"a", "a-b", "a--b", "node-1.example.com", "x-y-z"} {
		name := api.WorkloadEndpointName(node, "k8s", "ns-1", "pod-2", "", "eth0")
		got, ok := api.WorkloadEndpointNode(name)
		if !ok || got != node {
			t.Errorf("WorkloadEndpointNode(%q) = %q, %v; want %q", name, got, ok, node)
		}
		if !api.IsNodeWorkloadEndpointName(name, got) {
			t.Errorf("%q is not an endpoint name of node %q", name, got)
		}
	}
	for _, name := range []string{"", "-a", "nodash", "a--b"} {
		if got, ok := api.WorkloadEndpointNode(name); ok {
			t.Errorf("WorkloadEndpointNode(%q) = %q, true; want no node", name, got)
		}
	}
}

// A record that does not decode still names its container when its
// containerID is a string, whatever else is wrong with it.
func TestSalvageEndpointContainer(t *testing.T) {
	for raw, want := range map[string]string{
		`{"spec": {"containerID": "c1", "ports": 1}}`:    "c1",
		`{"spec": {"ports": 1, "containerID": "c2"}}`:    "c2",
		`{"metadata": 7, "spec": {"containerID": "c3"}}`: "c3",
		`{"spec": {"containerID": 5}}`:                   "",
		`{"spec": []}`:                                   "",
		`{"spec": {"containerID": "c4"`:                  "",
		`not json`:                                       "",
		`{}`:                                             "",
	} {
		if got := api.SalvageEndpointContainer([]byte(raw)); got != want {
			t.Errorf("SalvageEndpointContainer(%s) = %q, want %q", raw, got, want)
		}
	}
}
