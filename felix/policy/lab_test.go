package policy_test

import (
	"context"
	"fmt"
	"net/netip"
	"testing"

	"github.com/routed-net/routed/felix/policy"
	"github.com/routed-net/routed/felix/policy/internal/polab"
	"github.com/routed-net/routed/felix/policy/nftdp"
	"github.com/routed-net/routed/pkg/api"
)

// lab is a node with pods a, b and d in namespace prod and c in dev, each
// with a namespace profile that allows everything (as Kubernetes
// namespaces are until a policy selects a pod), echo servers on 8080,
// 9090 and 5353, and a Manager programming the node.
type lab struct {
	t    *testing.T
	node *polab.Node
	m    *policy.Manager
	pods map[string]*polab.Pod
	eps  map[string]policy.Endpoint
}

const baseModel = `
apiVersion: projectcalico.org/v3
kind: Profile
metadata: {name: kns.prod}
spec:
  labelsToApply: {pcns.env: prod}
  ingress: [{action: Allow}]
  egress: [{action: Allow}]
---
apiVersion: projectcalico.org/v3
kind: Profile
metadata: {name: kns.dev}
spec:
  labelsToApply: {pcns.env: dev}
  ingress: [{action: Allow}]
  egress: [{action: Allow}]
---
apiVersion: projectcalico.org/v3
kind: Profile
metadata: {name: ksa.prod.sa-a}
spec:
  labelsToApply: {pcsa.role: frontend}
`

func newLab(t *testing.T) *lab { return newLabWithLog(t, false) }

// newLabWithLog is newLab with Log rules on nflog group 7 and, with
// drops, the drops logged too.
func newLabWithLog(t *testing.T, drops bool) *lab {
	return newLabWithLogConfig(t, policy.LogConfig{Group: 7, Drops: drops})
}

// newLabWithLogConfig is newLab with that log configuration.
func newLabWithLogConfig(t *testing.T, lc policy.LogConfig) *lab {
	t.Helper()
	l := &lab{t: t, node: polab.NewNode(t), pods: map[string]*polab.Pod{}, eps: map[string]policy.Endpoint{}}
	var err error
	l.m, err = policy.NewManager(policy.Config{Dataplane: nftdp.Config{NetnsFd: l.node.Fd}, Log: lc})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.m.Close() })
	l.load(baseModel)
	web := []policy.NamedPort{{Name: "http", Proto: 6, Port: 8080}, {Name: "dns", Proto: 17, Port: 5353}}
	l.addPod("a", "prod", "sa-a", map[string]string{"app": "a", "team": "x"}, web)
	l.addPod("b", "prod", "sa-b", map[string]string{"app": "b"}, append(web, policy.NamedPort{Name: "web", Proto: 6, Port: 9090}))
	l.addPod("c", "dev", "sa-c", map[string]string{"app": "c", "team": "x"}, web)
	l.addPod("d", "prod", "sa-d", map[string]string{"app": "d"}, web)
	polab.Serve(t, l.node.NS, 7070)
	l.apply()
	return l
}

var podNum = map[string]int{"a": 1, "b": 2, "c": 3, "d": 4, "e": 5}

func (l *lab) addPod(name, ns, sa string, labels map[string]string, ports []policy.NamedPort) {
	n := podNum[name]
	p := l.node.AddPod(l.t, "cali"+name, fmt.Sprintf("10.65.0.%d", n), fmt.Sprintf("fd00:65::%d", n))
	for _, port := range []int{8080, 9090, 5353} {
		polab.Serve(l.t, p.NS, port)
	}
	l.pods[name] = p
	ep := policy.Endpoint{
		Key: "node-k8s-" + ns + "-" + name + "-eth0", Iface: p.Iface, Local: true,
		Namespace: ns, ServiceAccount: sa, Labels: labels,
		Profiles: []string{"kns." + ns, "ksa." + ns + "." + sa},
		IPs:      p.Prefixes(),
		Ports:    ports,
	}
	l.eps[name] = ep
	if err := l.m.SetEndpoint(ep); err != nil {
		l.t.Fatal(err)
	}
}

// load decodes YAML resources and sets them (del: deletes them).
func (l *lab) load(y string) { l.loadOrDelete(y, false) }

func (l *lab) loadOrDelete(y string, del bool) {
	l.t.Helper()
	d, err := api.Decode([]byte(y))
	if err != nil {
		l.t.Fatal(err)
	}
	for _, r := range d.Resources {
		switch r := r.(type) {
		case *api.Tier:
			if del {
				l.m.DeleteTier(r.Metadata.Name)
			} else {
				l.m.SetTier(r)
			}
		case api.Policy:
			if del {
				l.m.DeletePolicy(policy.PolicyKey(r))
			} else if err := l.m.SetPolicy(r); err != nil {
				l.t.Fatal(err)
			}
		case *api.Profile:
			if del {
				l.m.DeleteProfile(r.Metadata.Name)
			} else if err := l.m.SetProfile(r); err != nil {
				l.t.Fatal(err)
			}
		case *api.GlobalNetworkSet:
			if del {
				l.m.DeleteGlobalNetworkSet(r.Metadata.Name)
			} else if err := l.m.SetGlobalNetworkSet(r); err != nil {
				l.t.Fatal(err)
			}
		case *api.NetworkSet:
			if del {
				l.m.DeleteNetworkSet(r.Metadata.Namespace, r.Metadata.Name)
			} else if err := l.m.SetNetworkSet(r); err != nil {
				l.t.Fatal(err)
			}
		default:
			l.t.Fatalf("lab cannot load %T", r)
		}
	}
}

func (l *lab) apply() {
	l.t.Helper()
	if err := l.m.Apply(context.Background()); err != nil {
		l.t.Fatal(err)
	}
}

// probe is one expected verdict: from a pod (or "host") to a pod (or
// "host"), over a family.
type probe struct {
	from, to string
	proto    string // tcp, udp, icmp
	port     int
	srcPort  int
	v6       bool
	want     bool
}

func (l *lab) ns(name string) *polab.Pod {
	if name == "host" {
		return &polab.Pod{NS: l.node.NS, IPv4: netip.MustParseAddr(polab.HostIPv4), IPv6: netip.MustParseAddr(polab.HostIPv6)}
	}
	return l.pods[name]
}

// expect sends each probe and checks its verdict, and that Explain
// gives the same verdict for it (traffic from the node itself is not
// policed at all, so those probes are not explained).
func (l *lab) expect(why string, ps ...probe) {
	l.t.Helper()
	for _, p := range ps {
		dst := l.ns(p.to).Addr(p.v6)
		what := fmt.Sprintf("%s: %s->%s", why, p.from, p.to)
		polab.Expect(l.t, l.ns(p.from).NS, polab.Probe{Proto: p.proto, Dst: dst, Port: p.port, SrcPort: p.srcPort}, p.want, what)
		if p.from == "host" {
			continue
		}
		x := l.m.Explain(l.flow(p))
		if (!x.Egress.Policed && p.from != "host") || (!x.Ingress.Policed && p.to != "host") {
			// A pod the model has no endpoint for: its interface is
			// closed by the dispatch (fail closed), which the model
			// cannot see.
			continue
		}
		if x.Allowed() != p.want {
			l.t.Errorf("%s %s port %d v6=%v: explain says allowed=%v (egress %+v, ingress %+v), the probe says %v",
				what, p.proto, p.port, p.v6, x.Allowed(), x.Egress, x.Ingress, p.want)
		}
	}
}

// flow is the first packet a probe sends.
func (l *lab) flow(p probe) policy.Flow {
	f := policy.Flow{Src: l.ns(p.from).Addr(p.v6), Dst: l.ns(p.to).Addr(p.v6), SrcPort: uint16(p.srcPort), DstPort: uint16(p.port), ICMPType: -1, ICMPCode: -1}
	switch p.proto {
	case "tcp":
		f.Proto = 6
	case "udp":
		f.Proto = 17
	case "icmp":
		f.Proto, f.ICMPType, f.ICMPCode, f.DstPort = 1, 8, 0, 0
		if p.v6 {
			f.Proto, f.ICMPType = 58, 128
		}
	}
	return f
}

// both returns the probe for IPv4 and IPv6.
func both(p probe) []probe {
	q := p
	q.v6 = true
	return []probe{p, q}
}

func pass(from, to, proto string, port int) probe {
	return probe{from: from, to: to, proto: proto, port: port, want: true}
}

func drop(from, to, proto string, port int) probe {
	return probe{from: from, to: to, proto: proto, port: port}
}
