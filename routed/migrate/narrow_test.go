package migrate

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/routed-net/routed/pkg/api"
)

func calicoObj(t *testing.T, doc string) map[string]any {
	t.Helper()
	var obj map[string]any
	if err := json.Unmarshal([]byte(doc), &obj); err != nil {
		t.Fatal(err)
	}
	return obj
}

// TestNarrowHTTPDeniesAtLeastWhatCalicoDenied: an Allow or Log rule with
// an HTTP match is dropped, a Deny rule keeps its L3/L4 match without
// it; the types Calico inferred are pinned, so an egress list emptied by
// a dropped Allow keeps its default deny (inferred again, the policy
// would turn Ingress-only and egress would be open); a list emptied is
// absent (a second run must find the same spec); the input is left as
// it was; the decoded policy is what routed writes.
func TestNarrowHTTPDeniesAtLeastWhatCalicoDenied(t *testing.T) {
	doc := `{"kind":"GlobalNetworkPolicy","apiVersion":"projectcalico.org/v3","metadata":{"name":"l7"},"spec":{"selector":"app == 'web'",
	 "egress":[{"action":"Allow","protocol":"TCP","http":{"methods":["GET"]}},{"action":"Log","http":{"paths":[{"prefix":"/x"}]}}],
	 "ingress":[{"action":"Deny","protocol":"TCP","destination":{"ports":[80]},"http":{"methods":["POST"]}},{"action":"Allow","protocol":"TCP"}]}}`
	obj := calicoObj(t, doc)
	before := calicoObj(t, doc)
	out, lines := narrowHTTP(api.KindGlobalNetworkPolicy, obj)
	if !reflect.DeepEqual(obj, before) {
		t.Errorf("the input was modified: %v", obj)
	}
	if len(lines) != 3 || !strings.Contains(lines[0], "spec.ingress[0] (Deny") || !strings.Contains(lines[1], "spec.egress[0] (Allow") || !strings.Contains(lines[2], "spec.egress[1] (Log") {
		t.Errorf("changes: %q", lines)
	}
	r, _, err := decodeCalicoObject(api.KindGlobalNetworkPolicy, out, "test")
	if err != nil {
		t.Fatal(err)
	}
	p := r.(*api.GlobalNetworkPolicy).Spec
	if got := p.Types; len(got) != 2 || got[0] != api.PolicyTypeIngress || got[1] != api.PolicyTypeEgress {
		t.Errorf("types %v, want Ingress and Egress as Calico inferred them", got)
	}
	if p.Egress != nil {
		t.Errorf("egress %+v, want none (absent: default deny)", p.Egress)
	}
	if len(p.Ingress) != 2 || p.Ingress[0].Action != api.ActionDeny || p.Ingress[0].Protocol == nil || len(p.Ingress[0].Destination.Ports) != 1 || p.Ingress[1].Action != api.ActionAllow {
		t.Errorf("ingress %+v, want the Deny kept with its port, then the Allow", p.Ingress)
	}
	if a := r.Meta().Annotations[NarrowedAnnotation]; !strings.Contains(a, "spec.egress[0]") {
		t.Errorf("annotation %q does not record the change", a)
	}
}

// TestNarrowHTTPLeavesWhatHasNoNarrowerForm: a Pass rule with an HTTP
// match (dropping it lets its traffic meet its tier's later rules,
// which may allow it), a doNotTrack or preDNAT policy, a staged policy:
// not narrowed, so decoding refuses the field.
func TestNarrowHTTPLeavesWhatHasNoNarrowerForm(t *testing.T) {
	for _, c := range []struct {
		kind api.Kind
		doc  string
	}{
		{api.KindGlobalNetworkPolicy, `{"metadata":{"name":"p"},"spec":{"ingress":[{"action":"Allow","http":{"methods":["GET"]}},{"action":"Pass","http":{"methods":["GET"]}}]}}`},
		{api.KindGlobalNetworkPolicy, `{"metadata":{"name":"p"},"spec":{"doNotTrack":true,"applyOnForward":true,"ingress":[{"action":"Allow","http":{"methods":["GET"]}}]}}`},
		{api.KindGlobalNetworkPolicy, `{"metadata":{"name":"p"},"spec":{"preDNAT":true,"applyOnForward":true,"ingress":[{"action":"Deny","http":{"methods":["GET"]}}]}}`},
		{api.KindStagedGlobalNetworkPolicy, `{"metadata":{"name":"p"},"spec":{"ingress":[{"action":"Allow","http":{"methods":["GET"]}}]}}`},
		{api.KindNetworkPolicy, `{"metadata":{"name":"p","namespace":"n"},"spec":{"ingress":[{"action":"allow","http":{"methods":["GET"]}}]}}`},
	} {
		obj := calicoObj(t, c.doc)
		out, lines := narrowHTTP(c.kind, obj)
		if lines != nil || !reflect.DeepEqual(out, obj) {
			t.Errorf("%s: narrowed %q", c.doc, lines)
		}
		if _, _, err := decodeCalicoObject(c.kind, out, "test"); err == nil || !strings.Contains(err.Error(), ".http") {
			t.Errorf("%s: decoded, want the http match refused: %v", c.doc, err)
		}
	}
}

// TestNarrowHTTPProfile: a profile's rules narrow as a policy's do; a
// profile has no types to pin.
func TestNarrowHTTPProfile(t *testing.T) {
	obj := calicoObj(t, `{"metadata":{"name":"edge"},"spec":{"labelsToApply":{"zone":"edge"},
	 "ingress":[{"action":"Allow","http":{"methods":["GET"]}},{"action":"Deny","protocol":"TCP","http":{"paths":[{"exact":"/admin"}]}}]}}`)
	out, lines := narrowHTTP(api.KindProfile, obj)
	if len(lines) != 2 {
		t.Fatalf("changes %q", lines)
	}
	r, _, err := decodeCalicoObject(api.KindProfile, out, "test")
	if err != nil {
		t.Fatal(err)
	}
	p := r.(*api.Profile).Spec
	if len(p.Ingress) != 1 || p.Ingress[0].Action != api.ActionDeny || p.Ingress[0].Protocol == nil || p.LabelsToApply["zone"] != "edge" {
		t.Errorf("profile %+v, want only the Deny, without its HTTP match", p)
	}
}
