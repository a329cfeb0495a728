package bgp

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	api "github.com/osrg/gobgp/v4/api"
	"google.golang.org/protobuf/proto"

	pkgapi "github.com/routed-net/routed/pkg/api"
)

// ruleStatements turns one BGPFilter rule of the session whose neighbor
// set is nset into GoBGP statements named base-..., and the defined sets
// they use (to be added first). ifaceSubnets are the subnets of the
// interfaces r.Interface matches (their routes' next hops qualify).
//
// GoBGP's statement can prepend one AS number (repeated), so a prefix of
// several distinct ASNs becomes a chain: every statement but the last
// prepends one run of ASNs and carries no route action, so that GoBGP
// goes on to the next; the last adds the communities, prepends the
// first run and accepts. Each statement of the chain re-tests the
// rule's conditions on the route as the chain has changed it so far:
// only the AS path condition can change, so statement k wants the ASNs
// already prepended in front of the rule's ASPathPrefix. Communities are
// only added by the last statement, so a community condition holds
// along the chain.
//
// On an eBGP export (EBGPLocalAS set) the path already starts with this
// node's AS L when the policy runs. An AS path prefix is then matched
// behind L. A prepend of p1..pn ahead of L would make the peer see p1
// as its neighbor's AS (FRR and most routers drop such routes), so
// L p1..pn is prepended: the peer sees L p1..pn L <path>, one AS longer
// than Calico's L p1..pn <path>. A prepend of L only (AS path padding)
// is exactly Calico's. A source RemotePeers condition doubles each statement
// (GoBGP matches one route type at a time: iBGP-learned, eBGP-learned).
func ruleStatements(base, nset string, r FilterRule, ifaceSubnets []string) ([]*api.Statement, []*api.DefinedSet) {
	var sets []*api.DefinedSet
	cond := &api.Conditions{NeighborSet: &api.MatchSet{Name: nset, Type: api.MatchSet_TYPE_ANY}}
	if r.Interface != "" {
		cond.NextHopInList = ifaceSubnets
	}
	if r.CIDR.IsValid() {
		p := &api.Prefix{IpPrefix: r.CIDR.String(), MaskLengthMin: uint32(r.CIDR.Bits()), MaskLengthMax: uint32(r.CIDR.Bits())}
		switch {
		case r.MaxLen != 0:
			p.MaskLengthMin, p.MaskLengthMax = uint32(max(int(r.MinLen), r.CIDR.Bits())), uint32(r.MaxLen)
		case r.Op == pkgapi.MatchIn || r.Op == pkgapi.MatchNotIn:
			p.MaskLengthMax = uint32(r.CIDR.Addr().BitLen())
		}
		sets = append(sets, &api.DefinedSet{DefinedType: api.DefinedType_DEFINED_TYPE_PREFIX, Name: base, Prefixes: []*api.Prefix{p}})
		match := api.MatchSet_TYPE_ANY
		if r.Op == pkgapi.MatchNotEqual || r.Op == pkgapi.MatchNotIn {
			match = api.MatchSet_TYPE_INVERT
		}
		cond.PrefixSet = &api.MatchSet{Name: base, Type: match}
	}
	if r.Priority != 0 {
		cond.LocalPrefEq = &api.LocalPrefEq{Value: pkgapi.LocalPrefForPriority(r.Priority)}
	}
	if r.Community != "" {
		typ, name := api.DefinedType_DEFINED_TYPE_COMMUNITY, base+"-comm"
		if large, _ := pkgapi.ParseCommunity(r.Community); large {
			typ = api.DefinedType_DEFINED_TYPE_LARGE_COMMUNITY
		}
		sets = append(sets, &api.DefinedSet{DefinedType: typ, Name: name, List: []string{"^" + r.Community + "$"}})
		if typ == api.DefinedType_DEFINED_TYPE_LARGE_COMMUNITY {
			cond.LargeCommunitySet = &api.MatchSet{Name: name, Type: api.MatchSet_TYPE_ANY}
		} else {
			cond.CommunitySet = &api.MatchSet{Name: name, Type: api.MatchSet_TYPE_ANY}
		}
	}

	prepend, pathPrefix := r.Prepend, r.ASPathPrefix
	if l := r.EBGPLocalAS; l != 0 {
		if len(pathPrefix) > 0 {
			pathPrefix = append([]uint32{l}, pathPrefix...)
		}
		if slices.ContainsFunc(prepend, func(a uint32) bool { return a != l }) {
			prepend = append([]uint32{l}, prepend...)
		}
	}
	runs := asRuns(prepend)
	var stmts []*api.Statement
	// Step k prepends runs[len-1-k]; the ASNs prepended before it are
	// the runs after that one.
	for k := range max(len(runs), 1) {
		c := cloneConditions(cond)
		step := fmt.Sprintf("%s-%d", base, k)
		if len(pathPrefix) > 0 {
			var done []uint32
			for _, run := range runs[len(runs)-k:] {
				for range run.repeat {
					done = append(done, run.asn)
				}
			}
			name := step + "-aspath"
			sets = append(sets, &api.DefinedSet{DefinedType: api.DefinedType_DEFINED_TYPE_AS_PATH, Name: name,
				List: []string{asPathPrefixRegexp(append(done, pathPrefix...))}})
			c.AsPathSet = &api.MatchSet{Name: name, Type: api.MatchSet_TYPE_ANY}
		}
		act := &api.Actions{RouteAction: api.RouteAction_ROUTE_ACTION_UNSPECIFIED}
		if len(runs) > 0 {
			run := runs[len(runs)-1-k]
			act.AsPrepend = &api.AsPrependAction{Asn: run.asn, Repeat: run.repeat}
		}
		if last := k == max(len(runs), 1)-1; last {
			act.RouteAction = api.RouteAction_ROUTE_ACTION_REJECT
			if r.Accept {
				act.RouteAction = api.RouteAction_ROUTE_ACTION_ACCEPT
				addCommunityActions(act, r.AddCommunities)
				if r.SetPriority != 0 {
					act.LocalPref = &api.LocalPrefAction{Value: pkgapi.LocalPrefForPriority(r.SetPriority)}
				}
			}
		}
		stmts = append(stmts, &api.Statement{Name: step, Conditions: c, Actions: act})
	}
	if !r.RemoteOnly {
		return stmts, sets
	}
	var out []*api.Statement
	for _, st := range stmts {
		for _, rt := range []api.Conditions_RouteType{api.Conditions_ROUTE_TYPE_INTERNAL, api.Conditions_ROUTE_TYPE_EXTERNAL} {
			c := cloneConditions(st.Conditions)
			c.RouteType = rt
			out = append(out, &api.Statement{Name: st.Name + "-" + strings.ToLower(rt.String()[len("ROUTE_TYPE_"):]), Conditions: c, Actions: st.Actions})
		}
	}
	return out, sets
}

// asRun is one AS number repeated.
type asRun struct{ asn, repeat uint32 }

// asRuns groups consecutive equal ASNs: [1 1 2] is 1x2, 2x1.
func asRuns(asns []uint32) []asRun {
	var out []asRun
	for _, a := range asns {
		if n := len(out); n > 0 && out[n-1].asn == a {
			out[n-1].repeat++
			continue
		}
		out = append(out, asRun{asn: a, repeat: 1})
	}
	return out
}

// asPathPrefixRegexp is GoBGP's AS path regexp for paths that start with
// asns ("_" stands for a separator or either end).
func asPathPrefixRegexp(asns []uint32) string {
	var b strings.Builder
	b.WriteString("^")
	for _, a := range asns {
		b.WriteString(strconv.FormatUint(uint64(a), 10) + "_")
	}
	return b.String()
}

// addCommunityActions adds standard and large communities (checked by
// api.ParseCommunity when the filter was validated).
func addCommunityActions(act *api.Actions, values []string) {
	for _, v := range values {
		large, err := pkgapi.ParseCommunity(v)
		switch {
		case err != nil:
			continue
		case large:
			if act.LargeCommunity == nil {
				act.LargeCommunity = &api.CommunityAction{Type: api.CommunityAction_TYPE_ADD}
			}
			act.LargeCommunity.Communities = append(act.LargeCommunity.Communities, v)
		default:
			if act.Community == nil {
				act.Community = &api.CommunityAction{Type: api.CommunityAction_TYPE_ADD}
			}
			act.Community.Communities = append(act.Community.Communities, v)
		}
	}
}

func cloneConditions(c *api.Conditions) *api.Conditions {
	return proto.Clone(c).(*api.Conditions)
}
