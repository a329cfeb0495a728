package api_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/routed-net/routed/pkg/api"
)

func mustDecode(t *testing.T, in string) *api.Decoded {
	t.Helper()
	d, err := api.Decode([]byte(in))
	if err != nil {
		t.Fatalf("Decode: %v\ninput:\n%s", err, in)
	}
	return d
}

// names lists "Kind/name" for each decoded resource, in order.
func names(rs []api.Resource) []string {
	var out []string
	for _, r := range rs {
		out = append(out, string(r.GetKind())+"/"+r.Meta().Name)
	}
	return out
}

func TestDecodeDocuments(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		want []string
	}{
		{
			name: "single yaml document",
			in: `apiVersion: routed.io/v1
kind: IPPool
metadata:
  name: default-pool
spec:
  cidr: 10.244.0.0/16
`,
			want: []string{"IPPool/default-pool"},
		},
		{
			name: "multi-document yaml with empty documents and comments",
			in: `# leading comment
---
apiVersion: routed.io/v1
kind: IPPool
metadata: {name: a}
spec: {cidr: 10.1.0.0/16}
---
---   
# only a comment here
---
apiVersion: routed.io/v1
kind: Node
metadata: {name: n1}
--- # a comment after the separator
apiVersion: routed.io/v1
kind: BGPPeer
metadata: {name: tor}
spec: {peerIP: 10.0.0.1, asNumber: 65001}
---
`,
			want: []string{"IPPool/a", "Node/n1", "BGPPeer/tor"},
		},
		{
			name: "windows line endings",
			in:   "apiVersion: routed.io/v1\r\nkind: Node\r\nmetadata: {name: n1}\r\n---\r\napiVersion: routed.io/v1\r\nkind: Node\r\nmetadata: {name: n2}\r\n",
			want: []string{"Node/n1", "Node/n2"},
		},
		{
			name: "json object",
			in:   `{"apiVersion": "routed.io/v1", "kind": "IPPool", "metadata": {"name": "a"}, "spec": {"cidr": "10.1.0.0/16"}}`,
			want: []string{"IPPool/a"},
		},
		{
			name: "indented json",
			in: `{
  "apiVersion": "routed.io/v1",
  "kind": "Node",
  "metadata": {
    "name": "n1"
  }
}
`,
			want: []string{"Node/n1"},
		},
		{
			name: "json stream",
			in: `{"apiVersion": "routed.io/v1", "kind": "IPPool", "metadata": {"name": "a"}, "spec": {"cidr": "10.1.0.0/16"}}
{"apiVersion": "routed.io/v1", "kind": "IPPool", "metadata": {"name": "b"}, "spec": {"cidr": "10.2.0.0/16"}}
`,
			want: []string{"IPPool/a", "IPPool/b"},
		},
		{
			name: "generic list",
			in: `apiVersion: routed.io/v1
kind: List
items:
- apiVersion: routed.io/v1
  kind: IPPool
  metadata: {name: a}
  spec: {cidr: 10.1.0.0/16}
- apiVersion: routed.io/v1
  kind: Node
  metadata: {name: n1}
`,
			want: []string{"IPPool/a", "Node/n1"},
		},
		{
			name: "typed list items inherit kind and apiVersion",
			in: `apiVersion: routed.io/v1
kind: IPPoolList
items:
- metadata: {name: a}
  spec: {cidr: 10.1.0.0/16}
- metadata: {name: b}
  spec: {cidr: 10.2.0.0/16}
`,
			want: []string{"IPPool/a", "IPPool/b"},
		},
		{
			name: "list and object in one json stream",
			in: `{"apiVersion": "routed.io/v1", "kind": "List", "items": [{"apiVersion": "routed.io/v1", "kind": "Node", "metadata": {"name": "n1"}}]}
{"apiVersion": "routed.io/v1", "kind": "Node", "metadata": {"name": "n2"}}`,
			want: []string{"Node/n1", "Node/n2"},
		},
		{
			name: "empty list next to a resource",
			in: `apiVersion: routed.io/v1
kind: List
items: []
---
apiVersion: routed.io/v1
kind: Node
metadata: {name: n1}
`,
			want: []string{"Node/n1"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := mustDecode(t, tt.in)
			if got := names(d.Resources); !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
			if len(d.Warnings) != 0 {
				t.Errorf("native input must not warn: %q", d.Warnings)
			}
			for _, r := range d.Resources {
				if err := r.Validate(); err != nil {
					t.Errorf("decoded resource invalid: %v", err)
				}
			}
		})
	}
}

func TestDecodeDefaults(t *testing.T) {
	t.Parallel()
	d := mustDecode(t, `apiVersion: routed.io/v1
kind: IPPool
metadata: {name: p}
spec: {cidr: 10.244.3.0/16}
---
apiVersion: routed.io/v1
kind: BGPConfiguration
metadata: {name: default}
---
apiVersion: routed.io/v1
kind: BGPPeer
metadata: {name: tor}
spec: {peerIP: 10.0.0.1, asNumber: 65001}
---
apiVersion: routed.io/v1
kind: WorkloadEndpoint
metadata: {name: n1-k8s-default-w-eth0}
spec: {node: n1, containerID: c1, interfaceName: cali1, ipNetworks: [10.244.0.5/32]}
`)
	pool := d.Resources[0].(*api.IPPool)
	wantPool := api.IPPoolSpec{CIDR: "10.244.0.0/16", BlockSize: 26, IPIPMode: "Never", VXLANMode: "Never", NodeSelector: "all()"}
	if pool.Spec != wantPool {
		t.Errorf("pool defaults: got %+v, want %+v", pool.Spec, wantPool)
	}
	conf := d.Resources[1].(*api.BGPConfiguration)
	if conf.Spec.ASNumber != 64512 || conf.Spec.ListenPort != 179 || !conf.MeshEnabled() {
		t.Errorf("BGPConfiguration defaults: %+v", conf.Spec)
	}
	if peer := d.Resources[2].(*api.BGPPeer); peer.Spec.SourceAddress != api.SourceUseNodeIP {
		t.Errorf("BGPPeer sourceAddress default: %q", peer.Spec.SourceAddress)
	}
	if wep := d.Resources[3].(*api.WorkloadEndpoint); wep.Spec.Orchestrator != "k8s" {
		t.Errorf("WorkloadEndpoint orchestrator default: %q", wep.Spec.Orchestrator)
	}
}

func TestDecodeASNumber(t *testing.T) {
	t.Parallel()
	tests := []struct {
		value   string // as written after "asNumber: "
		want    api.ASNumber
		wantErr bool
	}{
		{value: "64512", want: 64512},
		{value: `"64512"`, want: 64512},
		{value: `"1.10"`, want: 65546},
		{value: "4294967294", want: 4294967294},
		{value: "6.4512e4", want: 64512}, // YAML reads this as the number 64512
		{value: "null", want: 0},
		{value: "", want: 0}, // empty YAML value is null: unset
		{value: "1.10", wantErr: true},
		{value: "65001.5", wantErr: true},
		{value: "0"},
		{value: "4294967295", wantErr: true},
		{value: "70000000000", wantErr: true},
		{value: `"70000000000"`, wantErr: true},
		{value: `"abc"`, wantErr: true},
		{value: "abc", wantErr: true},
		{value: "-1", wantErr: true},
		{value: "true", wantErr: true},
		{value: "[1]", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.value, func(t *testing.T) {
			t.Parallel()
			in := "apiVersion: routed.io/v1\nkind: Node\nmetadata: {name: n1}\nspec:\n  bgp:\n    asNumber: " + tt.value + "\n"
			d, err := api.Decode([]byte(in))
			if tt.value == "0" {
				// Parsing rejects 0 outright; it never means "unset" in a file.
				if !errors.Is(err, api.ErrDecode) {
					t.Fatalf("want ErrDecode, got %v", err)
				}
				return
			}
			if tt.wantErr {
				if !errors.Is(err, api.ErrDecode) {
					t.Fatalf("want ErrDecode, got %v", err)
				}
				if !strings.Contains(err.Error(), "AS number") {
					t.Errorf("message should say the AS number is wrong: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if got := d.Resources[0].(*api.Node).Spec.BGP.ASNumber; got != tt.want {
				t.Fatalf("asNumber %s decoded as %d, want %d", tt.value, got, tt.want)
			}
		})
	}
}

func TestASNumberJSON(t *testing.T) {
	t.Parallel()
	var a api.ASNumber = 7
	if err := json.Unmarshal([]byte("null"), &a); err != nil || a != 7 {
		t.Fatalf("null must leave the value alone: %d, %v", a, err)
	}
	if err := json.Unmarshal([]byte(`"65535.65534"`), &a); err != nil || a != 4294967294 {
		t.Fatalf(`"65535.65534": %d, %v`, a, err)
	}
	b, err := json.Marshal(api.ASNumber(65546))
	if err != nil || string(b) != "65546" {
		t.Fatalf("Marshal: %s, %v", b, err)
	}
}

const calicoFile = `# exported with calicoctl get -o yaml
apiVersion: projectcalico.org/v3
kind: IPPool
metadata:
  name: default-ipv4-ippool
  uid: 0d8c1f2e-1111-2222-3333-444455556666
  resourceVersion: "1234"
  creationTimestamp: "2024-05-01T10:00:00Z"
spec:
  cidr: 192.168.0.0/16
  blockSize: 26
  ipipMode: Always
  vxlanMode: Never
  natOutgoing: true
  nodeSelector: all()
  allowedUses: [Workload, Tunnel]
  disableBGPExport: false
---
apiVersion: projectcalico.org/v3
kind: BGPConfiguration
metadata:
  name: default
spec:
  logSeverityScreen: Warning
  nodeToNodeMeshEnabled: false
  asNumber: 63400
  serviceClusterIPs:
  - cidr: 10.96.0.0/12
  bindMode: NodeIP
---
apiVersion: projectcalico.org/v3
kind: Node
metadata:
  name: worker-1
  uid: 7f3a8b9c-aaaa-bbbb-cccc-ddddeeeeffff
  resourceVersion: "987"
  creationTimestamp: "2024-05-01T10:00:00Z"
  generation: 4
  labels:
    kubernetes.io/hostname: worker-1
spec:
  addresses:
  - address: 10.0.0.11/24
    type: CalicoNodeIP
  bgp:
    ipv4Address: 10.0.0.11/24
    ipv4IPIPTunnelAddr: 192.168.33.0
    asNumber: "1.10"
  orchRefs:
  - nodeName: worker-1
    orchestrator: k8s
status:
  podCIDRs:
  - 192.168.33.0/24
---
apiVersion: projectcalico.org/v3
kind: BGPPeer
metadata:
  name: rack1-tor
spec:
  nodeSelector: rack == 'rack-1'
  peerIP: 10.0.0.1
  asNumber: 64567
  maxRestartTime: 2m
  keepOriginalNextHop: true
`

func TestDecodeCalico(t *testing.T) {
	t.Parallel()
	d := mustDecode(t, calicoFile)
	if got, want := names(d.Resources), []string{"IPPool/default-ipv4-ippool", "BGPConfiguration/default", "Node/worker-1", "BGPPeer/rack1-tor"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for _, r := range d.Resources {
		if err := r.Validate(); err != nil {
			t.Errorf("imported resource invalid: %v", err)
		}
		if v := reflect.ValueOf(r).Elem().FieldByName("TypeMeta").Interface().(api.TypeMeta); v.APIVersion != api.APIVersion {
			t.Errorf("%s: apiVersion %q, want it rewritten to %s", r.Meta().Name, v.APIVersion, api.APIVersion)
		}
		if r.Meta().ResourceVersion != "" || r.Meta().UID != "" {
			t.Errorf("%s: Calico resourceVersion/uid must not be kept: %+v", r.Meta().Name, r.Meta())
		}
	}

	pool := d.Resources[0].(*api.IPPool)
	wantPool := api.IPPoolSpec{CIDR: "192.168.0.0/16", BlockSize: 26, IPIPMode: "Always", VXLANMode: "Never", NATOutgoing: true, NodeSelector: "all()"}
	if pool.Spec != wantPool {
		t.Errorf("pool: got %+v, want %+v", pool.Spec, wantPool)
	}
	if pool.Metadata.CreationTimestamp != "2024-05-01T10:00:00Z" {
		t.Errorf("creationTimestamp not kept: %q", pool.Metadata.CreationTimestamp)
	}

	conf := d.Resources[1].(*api.BGPConfiguration)
	if conf.Spec.LogSeverity != "Warning" {
		t.Errorf("logSeverityScreen must map to logSeverity, got %q", conf.Spec.LogSeverity)
	}
	if conf.MeshEnabled() || conf.Spec.ASNumber != 63400 || len(conf.Spec.ServiceClusterIPs) != 1 {
		t.Errorf("BGPConfiguration: %+v", conf.Spec)
	}

	node := d.Resources[2].(*api.Node)
	wantBGP := api.NodeBGPSpec{IPv4Address: "10.0.0.11/24", IPv4IPIPTunnelAddr: "192.168.33.0", ASNumber: 65546}
	if node.Spec.BGP == nil || *node.Spec.BGP != wantBGP {
		t.Errorf("node bgp: got %+v, want %+v", node.Spec.BGP, wantBGP)
	}
	if node.Metadata.Labels["kubernetes.io/hostname"] != "worker-1" {
		t.Errorf("node labels not kept: %v", node.Metadata.Labels)
	}

	peer := d.Resources[3].(*api.BGPPeer)
	if peer.Spec.PeerIP != "10.0.0.1" || peer.Spec.ASNumber != 64567 || !peer.Spec.KeepOriginalNextHop || peer.Spec.NodeSelector != "rack == 'rack-1'" {
		t.Errorf("peer: %+v", peer.Spec)
	}

	// One warning per dropped field, each saying where and what.
	wantWarnings := []struct{ where, field string }{
		{"document 1", "spec.allowedUses"},
		{"document 3", "spec.addresses"},
		{"document 3", "spec.orchRefs"},
		{"document 3", "status"},
		{"document 3", "metadata.generation"},
	}
	if len(d.Warnings) != len(wantWarnings) {
		t.Errorf("want %d warnings, got %d: %q", len(wantWarnings), len(d.Warnings), d.Warnings)
	}
	for _, w := range wantWarnings {
		found := false
		for _, got := range d.Warnings {
			if strings.HasPrefix(got, w.where+" ") && strings.Contains(got, " "+w.field+" ") {
				found = true
			}
		}
		if !found {
			t.Errorf("no warning for %s %s in %q", w.where, w.field, d.Warnings)
		}
	}
	// spec.bindMode and spec.maxRestartTime are honoured now, not dropped.
	for _, r := range d.Resources {
		if c, ok := r.(*api.BGPConfiguration); ok && c.Spec.BindMode == "" {
			t.Errorf("BGPConfiguration %s: bindMode dropped", c.Metadata.Name)
		}
	}
	for _, r := range d.Resources {
		if p, ok := r.(*api.BGPPeer); ok && p.Spec.MaxRestartTime != "2m" {
			t.Errorf("BGPPeer %s: maxRestartTime %q, want 2m", p.Metadata.Name, p.Spec.MaxRestartTime)
		}
	}
	for _, w := range d.Warnings {
		if strings.Contains(w, "uid") || strings.Contains(w, "resourceVersion") {
			t.Errorf("server-side metadata should be dropped quietly: %q", w)
		}
	}
}

func TestDecodeCalicoList(t *testing.T) {
	t.Parallel()
	d := mustDecode(t, `apiVersion: projectcalico.org/v3
kind: IPPoolList
metadata:
  resourceVersion: "5555"
items:
- apiVersion: projectcalico.org/v3
  kind: IPPool
  metadata: {name: a, uid: x}
  spec: {cidr: 10.1.0.0/16, allowedUses: [Workload]}
- metadata: {name: b}
  spec: {cidr: 10.2.0.0/16, ipipMode: CrossSubnet}
`)
	if got, want := names(d.Resources), []string{"IPPool/a", "IPPool/b"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	if len(d.Warnings) != 1 || !strings.Contains(d.Warnings[0], "item 1") || !strings.Contains(d.Warnings[0], "spec.allowedUses") {
		t.Errorf("want one warning naming item 1 and spec.allowedUses, got %q", d.Warnings)
	}
	if b := d.Resources[1].(*api.IPPool); b.Spec.IPIPMode != api.EncapCrossSubnet {
		t.Errorf("item 2: %+v", b.Spec)
	}
}

func TestDecodeErrors(t *testing.T) {
	t.Parallel()
	const pool = "apiVersion: routed.io/v1\nkind: IPPool\nmetadata: {name: a}\n"
	tests := []struct {
		name    string
		in      string
		is      error
		mention []string // what the message must name
		absent  []string // what it must not name
	}{
		{name: "empty input", in: "", is: api.ErrDecode},
		{name: "only separators", in: "---\n---\n", is: api.ErrDecode},
		{name: "yaml syntax", in: "apiVersion: routed.io/v1\nkind: [IPPool\n", is: api.ErrDecode, mention: []string{"document 1"}},
		{name: "syntax error in second document", in: pool + "spec: {cidr: 10.0.0.0/8}\n---\nkind: : :\n", is: api.ErrDecode, mention: []string{"document 2"}},
		{name: "content after a separator", in: pool + "spec: {cidr: 10.0.0.0/8}\n--- kind: Node\n", is: api.ErrDecode, mention: []string{"document 1", "separator", "kind: Node"}},
		{name: "missing kind", in: "apiVersion: routed.io/v1\nmetadata: {name: a}\n", is: api.ErrDecode, mention: []string{"kind"}},
		{name: "missing apiVersion", in: "kind: IPPool\nmetadata: {name: a}\n", is: api.ErrDecode, mention: []string{"apiVersion"}},
		{name: "foreign apiVersion", in: "apiVersion: networking.k8s.io/v1\nkind: IPPool\nmetadata: {name: a}\n", is: api.ErrDecode, mention: []string{"networking.k8s.io/v1", "crd.projectcalico.org/v1"}},
		{name: "unknown kind", in: "apiVersion: routed.io/v1\nkind: KubeControllersConfiguration\nmetadata: {name: a}\n", is: api.ErrUnknownKind, mention: []string{"KubeControllersConfiguration"}},
		{name: "unknown kind in list", in: "apiVersion: routed.io/v1\nkind: PodList\nitems: [{metadata: {name: a}}]\n", is: api.ErrUnknownKind, mention: []string{"Pod", "item 1"}},
		{name: "items not a list", in: "apiVersion: routed.io/v1\nkind: List\nitems: {a: 1}\n", is: api.ErrDecode, mention: []string{"items"}},
		{name: "item not an object", in: "apiVersion: routed.io/v1\nkind: List\nitems: [3]\n", is: api.ErrDecode, mention: []string{"item 1"}},
		{name: "calico workload endpoint", in: "apiVersion: projectcalico.org/v3\nkind: WorkloadEndpoint\nmetadata: {name: a}\n", is: api.ErrDecode, mention: []string{"WorkloadEndpoint", api.APIVersion}},
		{name: "calico ipam config", in: "apiVersion: projectcalico.org/v3\nkind: IPAMConfiguration\nmetadata: {name: default}\n", is: api.ErrDecode, mention: []string{"IPAMConfiguration"}},

		{name: "unknown spec field", in: pool + "spec: {cidrr: 10.0.0.0/8}\n", is: api.ErrDecode, mention: []string{"spec.cidrr"}},
		{name: "unknown metadata field", in: "apiVersion: routed.io/v1\nkind: IPPool\nmetadata: {name: a, foo: bar}\nspec: {cidr: 10.0.0.0/8}\n", is: api.ErrDecode, mention: []string{"metadata.foo"}},
		{name: "unknown top-level field", in: pool + "spec: {cidr: 10.0.0.0/8}\nstatus: {}\n", is: api.ErrDecode, mention: []string{"status"}},
		{name: "unknown nested field", in: "apiVersion: routed.io/v1\nkind: Node\nmetadata: {name: n}\nspec: {bgp: {ipv4Adress: 10.0.0.1/24}}\n", is: api.ErrDecode, mention: []string{"spec.bgp.ipv4Adress"}},
		{name: "unknown field in list element", in: "apiVersion: routed.io/v1\nkind: BGPConfiguration\nmetadata: {name: default}\nspec: {serviceClusterIPs: [{cidrs: 10.96.0.0/12}]}\n", is: api.ErrDecode, mention: []string{"spec.serviceClusterIPs[].cidrs"}},
		{name: "every unknown field named", in: "apiVersion: routed.io/v1\nkind: IPPool\nmetadata: {name: a, foo: 1}\nspec: {cidr: 10.0.0.0/8, blockSise: 24, ipip: Always}\n", is: api.ErrDecode, mention: []string{"metadata.foo", "spec.blockSise", "spec.ipip"}},
		{name: "calico-only field in native file", in: pool + "spec: {cidr: 10.0.0.0/8, allowedUses: [Workload]}\n", is: api.ErrDecode, mention: []string{"spec.allowedUses"}},
		{name: "calico logSeverityScreen in native file", in: "apiVersion: routed.io/v1\nkind: BGPConfiguration\nmetadata: {name: default}\nspec: {logSeverityScreen: Info}\n", is: api.ErrDecode, mention: []string{"spec.logSeverityScreen"}},
		{name: "unknown field in calico file", in: "apiVersion: projectcalico.org/v3\nkind: IPPool\nmetadata: {name: a}\nspec: {cidrr: 10.0.0.0/8, allowedUses: [Workload]}\n", is: api.ErrDecode, mention: []string{"spec.cidrr"}, absent: []string{"allowedUses"}},
		{name: "unknown field in second list item", in: "apiVersion: routed.io/v1\nkind: IPPoolList\nitems:\n- metadata: {name: a}\n  spec: {cidr: 10.1.0.0/16}\n- metadata: {name: b}\n  spec: {cidr: 10.2.0.0/16, natOutgoin: true}\n", is: api.ErrDecode, mention: []string{"item 2", "spec.natOutgoin"}},

		{name: "string for int", in: pool + "spec: {cidr: 10.0.0.0/8, blockSize: \"26\"}\n", is: api.ErrDecode, mention: []string{"spec.blockSize", "expected a whole number", "got a string"}},
		{name: "fraction for int", in: pool + "spec: {cidr: 10.0.0.0/8, blockSize: 26.5}\n", is: api.ErrDecode, mention: []string{"spec.blockSize"}},
		{name: "string for bool", in: pool + "spec: {cidr: 10.0.0.0/8, natOutgoing: \"yes\"}\n", is: api.ErrDecode, mention: []string{"spec.natOutgoing", "expected true or false"}},
		{name: "number for string", in: pool + "spec: {cidr: 10}\n", is: api.ErrDecode, mention: []string{"spec.cidr", "string"}},
		{name: "list for map", in: "apiVersion: routed.io/v1\nkind: Node\nmetadata: {name: a, labels: [a, b]}\n", is: api.ErrDecode, mention: []string{"metadata.labels"}},
		{name: "list for spec", in: pool + "spec: [10.0.0.0/8]\n", is: api.ErrDecode, mention: []string{"spec"}},
		{name: "port out of range", in: "apiVersion: routed.io/v1\nkind: BGPConfiguration\nmetadata: {name: default}\nspec: {listenPort: 70000}\n", is: api.ErrDecode, mention: []string{"spec.listenPort"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d, err := api.Decode([]byte(tt.in))
			if !errors.Is(err, tt.is) {
				t.Fatalf("want %v, got %v (decoded %v)", tt.is, err, d)
			}
			for _, m := range tt.mention {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("message should name %q: %v", m, err)
				}
			}
			for _, m := range tt.absent {
				if strings.Contains(err.Error(), m) {
					t.Errorf("message should not name %q: %v", m, err)
				}
			}
		})
	}
}

func sampleResources() []api.Resource {
	off := true
	rs := []api.Resource{
		&api.IPPool{Metadata: api.ObjectMeta{Name: "pool1", Labels: map[string]string{"tier": "a"}},
			Spec: api.IPPoolSpec{CIDR: "10.244.0.0/16", BlockSize: 24, IPIPMode: "CrossSubnet", NATOutgoing: true, NodeSelector: "rack == 'r1'"}},
		&api.BGPConfiguration{Metadata: api.ObjectMeta{Name: "default"},
			Spec: api.BGPConfigurationSpec{ASNumber: 4200000001, NodeToNodeMeshEnabled: &off, KeepaliveTime: "20s", HoldTime: "1m",
				ServiceClusterIPs: []api.ServiceClusterIP{{CIDR: "10.96.0.0/12"}}, LogSeverity: "Info"}},
		&api.Node{Metadata: api.ObjectMeta{Name: "node1", ResourceVersion: "42", CreationTimestamp: "2024-01-01T00:00:00Z", Annotations: map[string]string{"note": "x y"}},
			Spec: api.NodeSpec{BGP: &api.NodeBGPSpec{IPv4Address: "10.0.0.5/24", ASNumber: 65546, RouteReflectorClusterID: "224.0.0.1"}}},
		&api.BGPPeer{Metadata: api.ObjectMeta{Name: "rr"},
			Spec: api.BGPPeerSpec{NodeSelector: "!has(rr)", PeerSelector: "has(rr)", Password: &api.PasswordSource{SecretKeyRef: &api.SecretKeyRef{Name: "s", Key: "k"}}}},
		&api.WorkloadEndpoint{Metadata: api.ObjectMeta{Name: "node1-k8s-default-w1-eth0", Labels: map[string]string{"app": "web"}},
			Spec: api.WorkloadEndpointSpec{Node: "node1", Namespace: "default", Pod: "web", ContainerID: "c", InterfaceName: "cali1", ContainerInterface: "eth0", IPNetworks: []string{"10.244.0.5/32"}, MAC: "ee:ee:ee:ee:ee:ee", Handle: "h"}},
		&api.IPAMConfiguration{Metadata: api.ObjectMeta{Name: "default"}, Spec: api.IPAMConfigurationSpec{StrictAffinity: true, MaxBlocksPerHost: 3, AutoAllocateBlocks: &off}},
	}
	for _, r := range rs {
		tm := reflect.ValueOf(r).Elem().FieldByName("TypeMeta")
		tm.Set(reflect.ValueOf(api.TypeMeta{APIVersion: api.APIVersion, Kind: r.GetKind()}))
		api.SetDefaults(r)
	}
	return rs
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	t.Parallel()
	all := sampleResources()
	for _, r := range all {
		if err := r.Validate(); err != nil {
			t.Fatalf("sample must be valid: %v", err)
		}
	}
	tests := []struct {
		name   string
		rs     []api.Resource
		asList bool
	}{
		{name: "one", rs: all[:1]},
		{name: "one as list", rs: all[2:3], asList: true},
		{name: "every kind", rs: all},
	}
	for _, tt := range tests {
		for _, format := range []string{"yaml", "json"} {
			t.Run(tt.name+"/"+format, func(t *testing.T) {
				t.Parallel()
				var buf bytes.Buffer
				if err := api.Encode(&buf, tt.rs, format, tt.asList); err != nil {
					t.Fatalf("Encode: %v", err)
				}
				if format == "json" && !json.Valid(buf.Bytes()) {
					t.Fatalf("Encode json produced invalid JSON:\n%s", buf.String())
				}
				isList := strings.Contains(buf.String(), "List")
				if isList != (tt.asList || len(tt.rs) > 1) {
					t.Errorf("list wrapping: asList=%v, %d resources, output:\n%s", tt.asList, len(tt.rs), buf.String())
				}
				d, err := api.Decode(buf.Bytes())
				if err != nil {
					t.Fatalf("Decode of Encode output: %v\n%s", err, buf.String())
				}
				if len(d.Warnings) != 0 {
					t.Errorf("warnings: %q", d.Warnings)
				}
				if !reflect.DeepEqual(d.Resources, tt.rs) {
					for i := range tt.rs {
						if i < len(d.Resources) && !reflect.DeepEqual(d.Resources[i], tt.rs[i]) {
							t.Errorf("resource %d:\n got %+v\nwant %+v", i, d.Resources[i], tt.rs[i])
						}
					}
					t.Fatalf("round trip changed the resources:\n%s", buf.String())
				}
			})
		}
	}
}

func TestEncodeEdgeCases(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	if err := api.Encode(&buf, sampleResources()[:1], "xml", false); err == nil {
		t.Fatal("unknown format must fail")
	}
	buf.Reset()
	if err := api.Encode(&buf, nil, "json", true); err != nil {
		t.Fatal(err)
	}
	var list struct {
		Kind  string `json:"kind"`
		Items []any  `json:"items"`
	}
	if err := json.Unmarshal(buf.Bytes(), &list); err != nil || list.Kind != "List" || list.Items == nil || len(list.Items) != 0 {
		t.Fatalf("empty list must encode as items: [], got %s (%v)", buf.String(), err)
	}
}
