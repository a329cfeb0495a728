package felix

import (
	"net/netip"
	"testing"

	"github.com/routed-net/routed/felix/policy"
	"github.com/routed-net/routed/felix/policy/flowrec"
	"github.com/routed-net/routed/pkg/api"
)

const flowsGlueModel = `
apiVersion: projectcalico.org/v3
kind: Profile
metadata: {name: kns.prod}
spec: {ingress: [{action: Allow}], egress: [{action: Allow}]}
---
apiVersion: projectcalico.org/v3
kind: StagedGlobalNetworkPolicy
metadata: {name: lockdown}
spec: {order: 1, selector: app == 'b', types: [Ingress], ingress: [{action: Deny}]}
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkSet
metadata: {name: outside, labels: {kind: ext}}
spec: {nets: [203.0.113.0/24]}
`

func flowsWEP(name, node, ip string) *api.WorkloadEndpoint {
	w := &api.WorkloadEndpoint{}
	w.Metadata.Name, w.Metadata.Namespace = node+"-k8s-"+name+"-eth0", "prod"
	w.Metadata.Labels = map[string]string{"app": name}
	w.Spec = api.WorkloadEndpointSpec{Node: node, Orchestrator: "k8s", Namespace: "prod", Pod: name, Endpoint: "eth0",
		InterfaceName: "cali" + name, IPNetworks: []string{ip + "/32"}, Profiles: []string{"kns.prod"}}
	return w
}

// TestFlowsStateFollowsFeed: the flows' model takes what felix's feed
// gives (profiles, network sets, this node's and other nodes'
// endpoints, staged policies, which the policy dataplane never sees),
// names a flow's ends from it, evaluates the staged policy, forgets a
// deleted staged policy and is rebuilt from a snapshot.
func TestFlowsStateFollowsFeed(t *testing.T) {
	cfg := &Config{NodeName: "n1", PolicyLog: policy.LogConfig{Group: 100, FlowGroup: 101}, Flows: FlowsConfig{Sinks: []func(flowrec.Batch){func(flowrec.Batch) {}}}}
	s := newFlowsState(cfg)
	if s == nil {
		t.Fatal("flows are off with a flow group and a sink")
	}
	if newFlowsState(&Config{NodeName: "n1", PolicyLog: policy.LogConfig{Group: 100}}) != nil {
		t.Error("flows are on without a flow group")
	}
	d, err := api.Decode([]byte(flowsGlueModel))
	if err != nil {
		t.Fatal(err)
	}
	a, b := flowsWEP("a", "n1", "10.65.0.1"), flowsWEP("b", "n2", "10.65.1.1")
	for _, r := range append(d.Resources, a, b) {
		s.set(r)
	}
	f := policy.Flow{Src: netip.MustParseAddr("10.65.0.1"), Dst: netip.MustParseAddr("10.65.1.1"), Proto: 6, SrcPort: 40000, DstPort: 80, ICMPType: -1, ICMPCode: -1}
	src, dst, staged := s.model.Describe(f)
	if src.Kind != flowrec.EndPod || src.Name != "a" || !src.Local || dst.Name != "b" || dst.Local || dst.Node != "n2" || dst.Labels["app"] != "b" {
		t.Errorf("ends: %+v -> %+v", src, dst)
	}
	if len(staged) != 1 || staged[0].Policy != "staged:sgnp:lockdown" || staged[0].Allowed {
		t.Errorf("staged: %+v", staged)
	}
	_, ext, _ := s.model.Describe(policy.Flow{Src: f.Src, Dst: netip.MustParseAddr("203.0.113.9"), Proto: 6, DstPort: 443, ICMPType: -1, ICMPCode: -1})
	if ext.Kind != flowrec.EndNetworkSet || ext.Name != "gns:outside" || ext.Labels["kind"] != "ext" {
		t.Errorf("network set end: %+v", ext)
	}
	s.delete(api.KindStagedGlobalNetworkPolicy, "lockdown")
	if _, _, staged = s.model.Describe(f); len(staged) != 0 {
		t.Errorf("staged after its delete: %+v", staged)
	}
	// A snapshot without b: b's address is a plain address again.
	s.replace(map[api.Kind][]api.Resource{api.KindProfile: {d.Resources[0]}, api.KindWorkloadEndpoint: {a}})
	if _, dst, _ = s.model.Describe(f); dst.Kind != flowrec.EndNet {
		t.Errorf("after a snapshot without b: %+v", dst)
	}
	var nilState *flowsState
	nilState.set(a) // off: nothing to do, no panic
	nilState.delete(api.KindWorkloadEndpoint, "x")
	nilState.replace(nil)
}
