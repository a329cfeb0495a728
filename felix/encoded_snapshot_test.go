package felix

import (
	"encoding/json"
	"os/exec"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/feed"
)

// TestEncodedSnapshotIsTheDecodedOne: a snapshot whose endpoints felix
// decodes itself, a chunk at a time (feed.Undecoded, as the daemon
// subscribes it), programs the same tables, sets and elements as the
// same snapshot decoded beforehand; so does a second snapshot that
// drops a tenth of the endpoints and carries one unreadable (felix then
// holds neither: an endpoint it cannot read loses its old version, as
// in a decoded snapshot, which skips it).
func TestEncodedSnapshotIsTheDecodedOne(t *testing.T) {
	t.Parallel()
	c := bigCluster{eps: 3000, nodes: 100, namespaces: 40, policies: 60}
	decoded, encoded := newScaleNode(t, false), newScaleNode(t, false)
	first := c.snapshot(t, true)
	eps := first[api.KindWorkloadEndpoint]
	var enc []feed.Encoded
	for _, r := range eps {
		enc = append(enc, encodeAsStored(t, r))
	}
	encoded.take(t, feedSnap{rs: c.snapshot(t, false), enc: enc})
	decoded.take(t, feedSnap{rs: first})
	if got := len(encoded.l.policy.Endpoints()); got != c.eps {
		t.Fatalf("felix holds %d endpoints of the encoded snapshot's %d", got, c.eps)
	}
	sameRuleset(t, "first snapshot", decoded, encoded)

	// The second snapshot: every tenth endpoint gone, one unreadable.
	var kept []api.Resource
	enc = nil
	unreadable := api.StoreName(eps[5])
	for i, r := range eps {
		switch {
		case i%10 == 3:
		case i == 5:
			enc = append(enc, feed.NewEncoded(api.KindWorkloadEndpoint, unreadable, []byte(`{"kind":"WorkloadEndpoint",`), 2))
		default:
			kept = append(kept, r)
			enc = append(enc, encodeAsStored(t, r))
		}
	}
	second := c.snapshot(t, false)
	second[api.KindWorkloadEndpoint] = kept
	encoded.take(t, feedSnap{rs: c.snapshot(t, false), enc: enc})
	decoded.take(t, feedSnap{rs: second})
	held := encoded.l.policy.Endpoints()
	if len(held) != len(kept) || slices.Contains(held, unreadable) {
		t.Fatalf("after the second snapshot felix holds %d endpoints (the unreadable %s among them: %v), want the %d readable ones",
			len(held), unreadable, slices.Contains(held, unreadable), len(kept))
	}
	sameRuleset(t, "second snapshot", decoded, encoded)
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
	return objs
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
