package migrate

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/routed-net/routed/internal/dstest"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
)

// lossyCalico is a Calico etcd datastore holding, besides a pool and
// its tier, every kind of resource that enforces or shapes policy in a
// form routed cannot carry, one that narrows, and some that may be left
// out because they decide no verdict.
var lossyCalico = map[string]string{
	"ippools/p":      `{"kind":"IPPool","apiVersion":"projectcalico.org/v3","metadata":{"name":"p"},"spec":{"cidr":"10.246.0.0/16","blockSize":26}}`,
	"tiers/default":  `{"kind":"Tier","apiVersion":"projectcalico.org/v3","metadata":{"name":"default"},"spec":{"order":1000000}}`,
	"tiers/security": `{"kind":"Tier","apiVersion":"projectcalico.org/v3","metadata":{"name":"security"},"spec":{"order":100}}`,
	// Losses.
	"globalnetworkpolicies/default.deny-ssh": `{"kind":"GlobalNetworkPolicy","apiVersion":"projectcalico.org/v3","metadata":{"name":"default.deny-ssh"},"spec":{"tier":"default","selector":"app == 'db'",
	 "ingress":[{"action":"Deny","protocol":"TCP","destination":{"ports":[22]}},{"action":"Pass","http":{"methods":["GET"]}}]}}`,
	"networkpolicies/shop/gone.x":  `{"kind":"NetworkPolicy","apiVersion":"projectcalico.org/v3","metadata":{"name":"gone.x","namespace":"shop"},"spec":{"tier":"gone","selector":"all()","types":["Egress"]}}`,
	"networkpolicies/shop/gone.l7": `{"kind":"NetworkPolicy","apiVersion":"projectcalico.org/v3","metadata":{"name":"gone.l7","namespace":"shop"},"spec":{"tier":"gone","selector":"all()","ingress":[{"action":"Allow","http":{"methods":["GET"]}}]}}`,
	"hostendpoints/node-a-eth0":    `{"kind":"HostEndpoint","apiVersion":"projectcalico.org/v3","metadata":{"name":"node-a-eth0"},"spec":{"node":"node-a","interfaceName":"eth0","expectedIPs":["not-an-address"]}}`,
	"globalnetworksets/blocked":    `{"kind":"GlobalNetworkSet","apiVersion":"projectcalico.org/v3","metadata":{"name":"blocked","labels":{"blocked":"true"}},"spec":{"nets":["198.51.100.0/33"]}}`,
	"felixconfigurations/default":  `{"kind":"FelixConfiguration","apiVersion":"projectcalico.org/v3","metadata":{"name":"default"},"spec":{"bpfEnabled":true,"failsafeInboundHostPorts":[{"protocol":"TCP","port":22}]}}`,
	"globalthreatfeeds/tor-exits":  `{"kind":"GlobalThreatFeed","apiVersion":"projectcalico.org/v3","metadata":{"name":"tor-exits"},"spec":{}}`,
	"profiles/edge":                `{"kind":"Profile","apiVersion":"projectcalico.org/v3","metadata":{"name":"edge"},"spec":{"ingress":[{"action":"Pass","http":{"methods":["GET"]}}]}}`,
	"tiers/broken":                 `{"kind":"Tier","apiVersion":"projectcalico.org/v3","metadata":{"name":"broken"},"spec":{"order":1,"defaultAction":"Maybe"}}`,
	// Narrowed: the Allow with an HTTP match goes, egress keeps its
	// default deny.
	"networkpolicies/shop/default.l7": `{"kind":"NetworkPolicy","apiVersion":"projectcalico.org/v3","metadata":{"name":"default.l7","namespace":"shop"},"spec":{"tier":"default","selector":"app == 'web'",
	 "egress":[{"action":"Allow","protocol":"TCP","http":{"methods":["GET"]}}]}}`,
	// Left out with a notice: no verdict changes.
	"felixconfigurations/node.a":              `{"kind":"FelixConfiguration","apiVersion":"projectcalico.org/v3","metadata":{"name":"node.a"},"spec":{"bpfEnabled":true}}`,
	"stagedglobalnetworkpolicies/default.try": `{"kind":"StagedGlobalNetworkPolicy","apiVersion":"projectcalico.org/v3","metadata":{"name":"default.try"},"spec":{"tier":"default","ingress":[{"action":"Allow","http":{"methods":["GET"]}}]}}`,
	"clusterinformations/default":             `{"kind":"ClusterInformation","apiVersion":"projectcalico.org/v3","metadata":{"name":"default"},"spec":{}}`,
}

// wantLosses are lossyCalico's losses, each with a word of its
// consequence.
var wantLosses = map[string]string{
	"GlobalNetworkPolicy default.deny-ssh": "traffic its 1 Deny rule(s) denied would be allowed",
	"NetworkPolicy shop.gone.x":            `its tier "gone" is in neither datastore`,
	"NetworkPolicy shop.gone.l7":           `its tier "gone" is in neither datastore`,
	"HostEndpoint node-a-eth0":             "would not be policed",
	"GlobalNetworkSet blocked":             "Deny rule denied to or from them would be allowed",
	"FelixConfiguration default":           "failsafeInboundHostPorts",
	"globalthreatfeeds tor-exits":          "routed has no such resource",
	"Profile edge":                         "would lose its rules",
	"Tier broken":                          "its default action (Maybe) would not apply",
}

func putCalico(t *testing.T, src *datastore.Client, keys map[string]string) {
	t.Helper()
	for k, v := range keys {
		if _, err := src.Etcd().Put(context.Background(), calicoResources+k, v); err != nil {
			t.Fatal(err)
		}
	}
}

// written counts what routed holds of the kinds the migration writes.
func written(t *testing.T, to *datastore.Client) int {
	t.Helper()
	n := 0
	for _, k := range []api.Kind{api.KindIPPool, api.KindTier, api.KindGlobalNetworkPolicy, api.KindNetworkPolicy, api.KindProfile,
		api.KindHostEndpoint, api.KindGlobalNetworkSet, api.KindFelixConfiguration, api.KindStagedGlobalNetworkPolicy} {
		rs, _, err := to.List(context.Background(), k)
		if err != nil {
			t.Fatal(err)
		}
		n += len(rs)
	}
	return n
}

func checkLosses(t *testing.T, rep *Report) {
	t.Helper()
	got := map[string]PolicyLoss{}
	for _, l := range rep.PolicyLosses {
		got[l.Kind+" "+l.Name] = l
	}
	for name, word := range wantLosses {
		l, ok := got[name]
		if !ok {
			t.Errorf("%s is not a policy loss; losses %v, skipped %q", name, rep.PolicyLosses, rep.Skipped)
			continue
		}
		if s := l.String(); !strings.Contains(s, word) || l.Reason == "" || l.Consequence == "" {
			t.Errorf("%s: %q lacks %q, or a reason or consequence", name, s, word)
		}
	}
	if len(got) != len(wantLosses) {
		t.Errorf("losses %v, want only %d", rep.PolicyLosses, len(wantLosses))
	}
	for _, notice := range []string{"node.a", "default.try", "clusterinformations"} {
		found := false
		for _, s := range rep.Skipped {
			found = found || strings.Contains(s, notice)
		}
		if !found {
			t.Errorf("%s not listed as not carried: %q", notice, rep.Skipped)
		}
	}
	if len(rep.Narrowed) != 1 || rep.Narrowed[0].Name != "shop.default.l7" || !strings.Contains(rep.Narrowed[0].Change, "spec.egress[0] (Allow") {
		t.Errorf("narrowed %+v", rep.Narrowed)
	}
}

// TestPolicyLossRefusesTheRun: from Calico's etcd (a real one), every
// resource that enforces or shapes policy and cannot be carried (a
// policy with a Pass rule matching HTTP, a policy whose tier exists
// nowhere (narrowed or not: not listed as narrowed), a host endpoint, a network set, a FelixConfiguration setting
// failsafe ports, a profile, a tier, a kind routed does not know) is a
// policy loss naming why and what routed would allow without it; a
// FelixConfiguration setting none, a staged policy and a known
// bookkeeping kind are only listed. The plan and the run both refuse
// (ErrPolicyLoss) and write nothing. Accepted, the rest is carried (the
// HTTP Allow narrowed: the policy keeps its egress default deny); a
// second run is a no-op with the flag and refused without it; a run
// stopped after two writes is refused on resume without the flag,
// writing nothing more, and completes with it.
func TestPolicyLossRefusesTheRun(t *testing.T) {
	ctx := context.Background()
	src, to := dstest.Client(t), dstest.Client(t)
	putCalico(t, src, lossyCalico)

	for _, dry := range []bool{true, false} {
		rep, err := Calico(ctx, src, to, Options{DryRun: dry})
		if !errors.Is(err, ErrPolicyLoss) || rep == nil {
			t.Fatalf("dry run %v: %v, want ErrPolicyLoss", dry, err)
		}
		for name := range wantLosses {
			if !strings.Contains(err.Error(), name) {
				t.Errorf("the error does not name %s: %v", name, err)
			}
		}
		checkLosses(t, rep)
		if n := written(t, to); n != 0 {
			t.Fatalf("dry run %v: refused, but %d resources written", dry, n)
		}
	}

	rep, err := Calico(ctx, src, to, Options{AcceptPolicyLoss: true})
	if err != nil {
		t.Fatal(err)
	}
	checkLosses(t, rep)
	all := written(t, to)
	r, err := to.Get(ctx, api.KindNetworkPolicy, "shop.default.l7")
	if err != nil {
		t.Fatalf("the narrowed policy: %v", err)
	}
	p := r.(*api.NetworkPolicy).Spec
	if len(p.Types) != 1 || p.Types[0] != api.PolicyTypeEgress || len(p.Egress) != 0 || r.Meta().Annotations[NarrowedAnnotation] == "" {
		t.Errorf("narrowed policy %+v %v: want Egress with no rules (all egress denied), annotated", p, r.Meta().Annotations)
	}
	for _, k := range []struct {
		kind api.Kind
		name string
	}{{api.KindGlobalNetworkPolicy, "default.deny-ssh"}, {api.KindHostEndpoint, "node-a-eth0"}, {api.KindProfile, "edge"}} {
		if _, err := to.Get(ctx, k.kind, k.name); !datastore.IsNotFound(err) {
			t.Errorf("%s %s: %v, want not carried", k.kind, k.name, err)
		}
	}

	created := 0
	count := func(Item) { created++ }
	if _, err := Calico(ctx, src, to, Options{AcceptPolicyLoss: true, Progress: count}); err != nil || created != 0 {
		t.Errorf("second run: %v, %d created, want a no-op", err, created)
	}
	if _, err := Calico(ctx, src, to, Options{Progress: count}); !errors.Is(err, ErrPolicyLoss) || created != 0 {
		t.Errorf("second run without accepting: %v, %d created, want refused", err, created)
	}

	// Resumed: a fresh routed, a run cancelled after two writes.
	to2 := dstest.Client(t)
	cctx, cancel := context.WithCancel(ctx)
	stopAt2 := func(Item) {
		if created++; created == 2 {
			cancel()
		}
	}
	created = 0
	if _, err := Calico(cctx, src, to2, Options{AcceptPolicyLoss: true, Progress: stopAt2}); err == nil {
		t.Fatal("the cancelled run completed")
	}
	partial := written(t, to2)
	if _, err := Calico(ctx, src, to2, Options{}); !errors.Is(err, ErrPolicyLoss) || written(t, to2) != partial {
		t.Errorf("resumed without accepting: %v, %d written (was %d), want refused with nothing more", err, written(t, to2), partial)
	}
	if _, err := Calico(ctx, src, to2, Options{AcceptPolicyLoss: true}); err != nil || written(t, to2) != all {
		t.Errorf("resumed: %v, %d written, want %d", err, written(t, to2), all)
	}
}
