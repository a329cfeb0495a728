package flowrec_test

import (
	"net/netip"
	"testing"

	"github.com/routed-net/routed/felix/policy"
	"github.com/routed-net/routed/felix/policy/flowrec"
	"github.com/routed-net/routed/pkg/api"
)

// TestModelRemembersUntilChanged: LockedModel names an address once
// and skips the staged evaluation of a pair no staged policy concerns,
// but only until the model changes: a pod relabelled into the staged
// policy's selector gets its staged verdict on the next flow, and its
// new labels.
func TestModelRemembersUntilChanged(t *testing.T) {
	model := flowrec.NewLockedModel()
	d, err := api.Decode([]byte(flowModel))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range d.Resources {
		if err := model.Update(func(c *policy.Calc) error { return c.SetResource(r) }); err != nil {
			t.Fatal(err)
		}
	}
	sd, err := api.Decode([]byte(stagedDeny))
	if err != nil {
		t.Fatal(err)
	}
	sg := sd.Resources[0].(*api.StagedGlobalNetworkPolicy)
	model.SetStaged([]policy.StagedPolicy{{Kind: sg.GetKind(), Name: sg.Metadata.Name, Action: sg.Action(), Policy: sg.Enforced()}})
	ep := func(name, app, ip string) policy.Endpoint {
		return policy.Endpoint{Key: "node-k8s-prod-" + name + "-eth0", Iface: "cali" + name, Local: true, Node: "node", Pod: name, Namespace: "prod",
			Labels: map[string]string{"app": app}, Profiles: []string{"kns.prod"}, IPs: []netip.Prefix{netip.MustParsePrefix(ip + "/32")}}
	}
	set := func(e policy.Endpoint) {
		t.Helper()
		if err := model.Update(func(c *policy.Calc) error { c.SetEndpoint(e); return nil }); err != nil {
			t.Fatal(err)
		}
	}
	set(ep("a", "a", "10.65.0.1"))
	set(ep("c", "c", "10.65.0.3"))
	v0, ok := model.Version()
	if ok {
		t.Errorf("Version says answers depend on addresses alone with a staged policy")
	}
	f := policy.Flow{Src: netip.MustParseAddr("10.65.0.1"), Dst: netip.MustParseAddr("10.65.0.3"), Proto: 6, SrcPort: 40000, DstPort: 8080, ICMPType: -1, ICMPCode: -1}
	for port := range uint16(3) {
		f.SrcPort = 40000 + port
		src, dst, staged := model.Describe(f)
		if src.Name != "a" || dst.Labels["app"] != "c" || len(staged) != 0 {
			t.Fatalf("a->c (no staged policy concerns c): %+v -> %+v, staged %+v", src, dst, staged)
		}
	}
	// c relabelled app=b: the staged lockdown (app == 'b', deny TCP
	// 8080) now concerns it.
	set(ep("c", "b", "10.65.0.3"))
	if v1, _ := model.Version(); v1 == v0 {
		t.Errorf("version %d unchanged by an endpoint update", v1)
	}
	_, dst, staged := model.Describe(f)
	if dst.Labels["app"] != "b" || len(staged) != 1 || staged[0].Policy != "staged:sgnp:lockdown" || staged[0].Allowed {
		t.Errorf("a->c relabelled app=b: dst %+v, staged %+v", dst, staged)
	}
}
