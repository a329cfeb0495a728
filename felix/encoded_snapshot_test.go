package felix

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"os/exec"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/routed-net/routed/felix/policy"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/feed"
)

// TestEncodedSnapshotIsTheDecodedOne: a snapshot whose endpoints felix
// decodes itself, a chunk at a time (feed.Undecoded, as the daemon
// subscribes it), leaves felix as the same snapshot decoded beforehand:
// the same nftables tables, chains, sets and elements, the same local
// endpoints for routes, the same names in the flow records. A second
// snapshot then drops a tenth of the endpoints, a profile and a policy,
// carries one endpoint unreadable and gives a local pod's interface to
// an endpoint of another name: felix ends as a felix that took only
// that snapshot (the unreadable endpoint's old version gone and a deny
// of its addresses in its place; the interface dispatched to its new
// endpoint).
func TestEncodedSnapshotIsTheDecodedOne(t *testing.T) {
	t.Parallel()
	c := bigCluster{eps: 3000, nodes: 100, namespaces: 40, policies: 60}
	decoded, encoded := newScaleNode(t, true), newScaleNode(t, true)
	first := c.snapshot(t, true)
	eps := first[api.KindWorkloadEndpoint]
	encoded.take(t, feedSnap{rs: c.snapshot(t, false), enc: encodeAll(t, eps)})
	decoded.take(t, feedSnap{rs: first})
	if got := len(encoded.l.policy.Endpoints()); got != c.eps {
		t.Fatalf("felix holds %d endpoints of the encoded snapshot's %d", got, c.eps)
	}
	sameState(t, "first snapshot", decoded, encoded, eps)

	second := c.snapshot(t, false)
	second[api.KindProfile] = second[api.KindProfile][1:]
	for _, k := range []api.Kind{api.KindNetworkPolicy, api.KindGlobalNetworkPolicy} {
		if len(second[k]) < 2 {
			t.Fatalf("the cluster has %d %ss: nothing to drop", len(second[k]), k)
		}
		second[k] = second[k][1:]
	}
	var kept []api.Resource
	var enc []feed.Encoded
	unreadable, moved := api.StoreName(eps[5]), ""
	var unreadableEnc feed.Encoded
	for i, r := range eps {
		w := r.(*api.WorkloadEndpoint)
		switch {
		case i == 5:
			// Its ports not a list: it does not decode; its addresses
			// are read (the same as the previous version's).
			nets, err := json.Marshal(w.Spec.IPNetworks)
			if err != nil {
				t.Fatal(err)
			}
			enc = append(enc, feed.NewEncoded(api.KindWorkloadEndpoint, unreadable, []byte(`{"kind":"WorkloadEndpoint","spec":{"ipNetworks":`+string(nets)+`,"ports":7}}`), 2))
			unreadableEnc = enc[len(enc)-1]
			continue
		case i%10 == 3:
			continue
		case moved == "" && w.Spec.Node == "node-0" && i != 5:
			// The same pod and interface, another endpoint name.
			n := *w
			n.Metadata.Name = api.WorkloadEndpointName(w.Spec.Node, "k8s", w.Spec.Namespace, w.Spec.Pod, "", "net1")
			n.Spec.Endpoint = "net1"
			moved, r = w.Metadata.Name, &n
		}
		kept = append(kept, r)
		enc = append(enc, encodeAsStored(t, r))
	}
	if moved == "" {
		t.Fatal("no endpoint on node-0 to move")
	}
	fresh := newScaleNode(t, true)
	encoded.take(t, feedSnap{rs: second, enc: enc})
	secondDecoded := c.snapshot(t, false)
	secondDecoded[api.KindProfile], secondDecoded[api.KindNetworkPolicy], secondDecoded[api.KindGlobalNetworkPolicy] =
		second[api.KindProfile], second[api.KindNetworkPolicy], second[api.KindGlobalNetworkPolicy]
	secondDecoded[api.KindWorkloadEndpoint] = kept
	// The fresh felix takes the unreadable endpoint as it comes, the
	// others decoded.
	fresh.take(t, feedSnap{rs: secondDecoded, enc: []feed.Encoded{unreadableEnc}})
	if got := encoded.l.policy.Unreadable(); len(got) != 1 || got[0].Kind != api.KindWorkloadEndpoint || got[0].Name != unreadable {
		t.Fatalf("after the second snapshot felix denies for %+v, want the unreadable endpoint %s", got, unreadable)
	}
	held := encoded.l.policy.Endpoints()
	if len(held) != len(kept) || slices.Contains(held, unreadable) || slices.Contains(held, moved) {
		t.Fatalf("after the second snapshot felix holds %d endpoints (the unreadable %v, the moved %v among them), want the %d readable ones",
			len(held), slices.Contains(held, unreadable), slices.Contains(held, moved), len(kept))
	}
	sameState(t, "second snapshot", fresh, encoded, eps)
}

// TestEncodedSnapshotWithoutPolicy: with the policy dataplane off, the
// routes' state still gets a snapshot's undecoded endpoints: the local
// ones, and only those.
func TestEncodedSnapshotWithoutPolicy(t *testing.T) {
	t.Parallel()
	c := bigCluster{eps: 2000, nodes: 50, namespaces: 20, policies: 10}
	all := c.snapshot(t, true)
	want := map[string]bool{}
	for _, r := range all[api.KindWorkloadEndpoint] {
		if r.(*api.WorkloadEndpoint).Spec.Node == "node-0" {
			want[api.StoreName(r)] = true
		}
	}
	l := &loop{cfg: &Config{NodeName: "node-0"}, st: newState(), policyNames: names{}}
	l.replace(c.snapshot(t, false), encodeAll(t, all[api.KindWorkloadEndpoint]), nil)
	if len(want) == 0 || len(l.st.weps) != len(want) {
		t.Fatalf("routes' state holds %d local endpoints, want %d", len(l.st.weps), len(want))
	}
	for name := range l.st.weps {
		if !want[name] {
			t.Fatalf("routes' state holds %s, not a local endpoint", name)
		}
	}
}

func encodeAll(t *testing.T, rs []api.Resource) []feed.Encoded {
	out := make([]feed.Encoded, 0, len(rs))
	for _, r := range rs {
		out = append(out, encodeAsStored(t, r))
	}
	return out
}

// sameState fails unless a and b programmed the same ruleset, hold the
// same local endpoints for routes and name the same ends of flows
// (every endpoint address in eps, and one outside them).
func sameState(t *testing.T, what string, a, b *scaleNode, eps []api.Resource) {
	t.Helper()
	sameRuleset(t, what, a, b)
	if ka, kb := slices.Sorted(maps.Keys(a.l.st.weps)), slices.Sorted(maps.Keys(b.l.st.weps)); !slices.Equal(ka, kb) || len(ka) == 0 {
		t.Fatalf("%s: local endpoints for routes %v and %v", what, ka, kb)
	}
	outside := netip.MustParseAddr("192.0.2.7")
	for i, r := range eps {
		ip := netip.MustParsePrefix(r.(*api.WorkloadEndpoint).Spec.IPNetworks[0]).Addr()
		f := policy.Flow{Src: ip, Dst: outside, Proto: 6, SrcPort: 40000 + uint16(i%1000), DstPort: 80, ICMPType: -1, ICMPCode: -1}
		sa, da, _ := a.flows.model.Describe(f)
		sb, db, _ := b.flows.model.Describe(f)
		if !reflect.DeepEqual(sa, sb) || !reflect.DeepEqual(da, db) {
			t.Fatalf("%s: the flow records name %s -> %s as %+v -> %+v and %+v -> %+v", what, ip, outside, sa, da, sb, db)
		}
	}
}

// sameRuleset fails unless both nodes' netns hold the same nftables
// ruleset: tables, chains, rules, sets and their elements, handles and
// the order of a set's elements aside.
func sameRuleset(t *testing.T, what string, a, b *scaleNode) {
	t.Helper()
	ra, rb := ruleset(t, a), ruleset(t, b)
	if len(ra) < 10 {
		t.Fatalf("%s: %d ruleset objects: nothing programmed to compare", what, len(ra))
	}
	if !reflect.DeepEqual(ra, rb) {
		for i := range min(len(ra), len(rb)) {
			if !reflect.DeepEqual(ra[i], rb[i]) {
				x, _ := json.Marshal(ra[i])
				y, _ := json.Marshal(rb[i])
				t.Fatalf("%s: rulesets differ (%d and %d objects); first difference:\ndecoded %.600s\nencoded %.600s", what, len(ra), len(rb), x, y)
			}
		}
		t.Fatalf("%s: rulesets differ: %d objects decoded, %d encoded", what, len(ra), len(rb))
	}
}

// ruleset is n's nftables ruleset (nft -j), without handles, each set's
// elements sorted.
func ruleset(t *testing.T, n *scaleNode) []any {
	t.Helper()
	out, err := exec.Command("nsenter", "--net="+n.ns.Path(), "nft", "-j", "list", "ruleset").Output()
	if err != nil {
		t.Fatalf("nft list ruleset: %v", err)
	}
	var doc struct {
		Nftables []map[string]any `json:"nftables"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatal(err)
	}
	var objs []any
	for _, o := range doc.Nftables {
		if _, ok := o["metainfo"]; ok {
			continue
		}
		objs = append(objs, normalize(o))
	}
	// Tables, chains and sets in name order (nft lists them in the order
	// made, which a felix's history decides); rules keep their order
	// within their chain.
	slices.SortStableFunc(objs, func(x, y any) int { return strings.Compare(objectKey(x), objectKey(y)) })
	return objs
}

// objectKey orders a ruleset's objects: a rule by its chain, anything
// else by all of it.
func objectKey(o any) string {
	if r, ok := o.(map[string]any)["rule"].(map[string]any); ok {
		return fmt.Sprint("rule ", r["family"], " ", r["table"], " ", r["chain"])
	}
	b, _ := json.Marshal(o)
	return string(b)
}

func normalize(v any) any {
	switch x := v.(type) {
	case map[string]any:
		delete(x, "handle")
		for k, e := range x {
			x[k] = normalize(e)
		}
		if elems, ok := x["elem"].([]any); ok {
			slices.SortFunc(elems, func(p, q any) int {
				a, _ := json.Marshal(p)
				b, _ := json.Marshal(q)
				return strings.Compare(string(a), string(b))
			})
		}
		return x
	case []any:
		for i := range x {
			x[i] = normalize(x[i])
		}
		return x
	}
	return v
}
