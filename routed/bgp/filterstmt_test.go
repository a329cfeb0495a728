package bgp

import (
	"net/netip"
	"testing"

	api "github.com/osrg/gobgp/v4/api"
)

// TestRuleStatementsPrependChain: a prepend of distinct ASNs becomes a
// chain whose AS path condition follows what the chain prepended so
// far; only the last statement accepts and adds communities; source
// RemotePeers doubles every statement (iBGP- and eBGP-learned).
func TestRuleStatementsPrependChain(t *testing.T) {
	r := FilterRule{Accept: true, Op: "In", CIDR: netip.MustParsePrefix("10.0.0.0/8"), MinLen: 16, MaxLen: 24,
		ASPathPrefix: []uint32{65000}, Prepend: []uint32{1, 2, 2}, AddCommunities: []string{"1:1", "1:2:3"}, RemoteOnly: true}
	stmts, sets := ruleStatements("f-0", "nb", r, nil)
	if len(stmts) != 4 {
		t.Fatalf("%d statements, want 2 steps x 2 route types", len(stmts))
	}
	paths := map[string]string{}
	for _, s := range sets {
		switch s.DefinedType {
		case api.DefinedType_DEFINED_TYPE_AS_PATH:
			paths[s.Name] = s.List[0]
		case api.DefinedType_DEFINED_TYPE_PREFIX:
			if p := s.Prefixes[0]; p.MaskLengthMin != 16 || p.MaskLengthMax != 24 {
				t.Errorf("prefix set %+v", p)
			}
		}
	}
	// Step 0 prepends 2 twice on a path starting 65000; step 1 prepends 1
	// on a path now starting 2 2 65000, and accepts.
	want := []struct {
		asn, repeat uint32
		path        string
		action      api.RouteAction
	}{{2, 2, "^65000_", api.RouteAction_ROUTE_ACTION_UNSPECIFIED}, {1, 1, "^2_2_65000_", api.RouteAction_ROUTE_ACTION_ACCEPT}}
	for i, s := range stmts {
		w := want[i/2]
		if s.Actions.AsPrepend.GetAsn() != w.asn || s.Actions.AsPrepend.GetRepeat() != w.repeat || s.Actions.RouteAction != w.action ||
			paths[s.Conditions.AsPathSet.GetName()] != w.path || s.Conditions.RouteType == api.Conditions_ROUTE_TYPE_UNSPECIFIED {
			t.Errorf("statement %d: %v", i, s)
		}
		if last := w.action == api.RouteAction_ROUTE_ACTION_ACCEPT; last != (s.Actions.Community != nil && s.Actions.LargeCommunity != nil) {
			t.Errorf("statement %d: communities only on the accepting one: %v", i, s.Actions)
		}
	}

	// eBGP export: the path prefix is matched behind the local AS, and a
	// foreign prepend goes in front of it with it repeated first.
	r = FilterRule{Accept: true, ASPathPrefix: []uint32{7}, Prepend: []uint32{9}, EBGPLocalAS: 64512}
	stmts, sets = ruleStatements("f-1", "nb", r, nil)
	if len(stmts) != 2 || stmts[0].Actions.AsPrepend.GetAsn() != 9 || stmts[1].Actions.AsPrepend.GetAsn() != 64512 ||
		sets[0].List[0] != "^64512_7_" || sets[1].List[0] != "^9_64512_7_" {
		t.Fatalf("eBGP export chain: %v %v", stmts, sets)
	}
	// Padding with the local AS only is Calico's path exactly.
	r.Prepend, r.ASPathPrefix = []uint32{64512, 64512}, nil
	if stmts, _ = ruleStatements("f-2", "nb", r, nil); len(stmts) != 1 || stmts[0].Actions.AsPrepend.GetRepeat() != 2 {
		t.Fatalf("padding: %v", stmts)
	}
}

// TestRuleStatementsPriority: a priority match is a LOCAL_PREF condition
// and setPriority a LOCAL_PREF action on the accepting statement, both
// at Calico's 2147483647 - priority.
func TestRuleStatementsPriority(t *testing.T) {
	r := FilterRule{Accept: true, Priority: 100, SetPriority: 256, Prepend: []uint32{1, 2}}
	stmts, _ := ruleStatements("f-0", "nb", r, nil)
	if len(stmts) != 2 {
		t.Fatalf("%d statements", len(stmts))
	}
	for i, s := range stmts {
		if s.Conditions.LocalPrefEq.GetValue() != 2147483547 {
			t.Errorf("statement %d matches %v, want LOCAL_PREF 2147483547", i, s.Conditions.LocalPrefEq)
		}
		if last := i == len(stmts)-1; last != (s.Actions.LocalPref.GetValue() == 2147483391) {
			t.Errorf("statement %d sets %v: only the accepting one sets LOCAL_PREF 2147483391", i, s.Actions.LocalPref)
		}
	}
	// A reject rule changes nothing.
	r = FilterRule{Priority: 100, SetPriority: 256}
	if stmts, _ = ruleStatements("f-1", "nb", r, nil); stmts[0].Actions.LocalPref != nil {
		t.Errorf("a reject rule sets LOCAL_PREF: %v", stmts[0].Actions)
	}
}
