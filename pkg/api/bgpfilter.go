package api

import (
	"fmt"
	"net/netip"
	"path"
	"strings"
)

// BGPFilter holds import and export rules for the BGP sessions of the
// BGPPeers that name it in spec.filters (Calico's BGPFilter). Rules are
// tried in order; the first that matches decides; a route no rule
// matches is accepted.
type BGPFilter struct {
	TypeMeta `json:",inline"`
	Metadata ObjectMeta    `json:"metadata"`
	Spec     BGPFilterSpec `json:"spec"`
}

// BGPFilterSpec lists the rules per direction and family: IPv4 rules act
// on the IPv4 sessions, IPv6 rules on the IPv6 sessions.
type BGPFilterSpec struct {
	ExportV4 []BGPFilterRule `json:"exportV4,omitempty"`
	ImportV4 []BGPFilterRule `json:"importV4,omitempty"`
	ExportV6 []BGPFilterRule `json:"exportV6,omitempty"`
	ImportV6 []BGPFilterRule `json:"importV6,omitempty"`
}

// BGPFilterRule matches routes on every condition it sets (none set:
// every route) and accepts them, after applying Operations, or rejects
// them. Conditions, as Calico's:
//   - CIDR with MatchOperator: Equal (exactly it), NotEqual, In (it or
//     inside it), NotIn; PrefixLength narrows In to prefix lengths
//     between Min and Max.
//   - Source RemotePeers: only routes learned from a BGP peer (on
//     export: not the routes this node originates; on import every route
//     is).
//   - PeerType eBGP or iBGP: only on sessions of that kind.
//   - Communities: routes carrying that standard or large community.
//   - ASPathPrefix: routes whose AS path starts with these AS numbers.
//   - Interface: routes learned from a peer whose next hop lies in a
//     subnet of an interface whose name matches this glob (* and ?), as
//     BIRD's ifname of a BGP route is the interface its next hop is
//     reached through; never the routes this node originates.
//   - Priority: routes of that route priority (RoutePriority), the
//     kernel metric Calico carries in LOCAL_PREF; the routes this node
//     originates have DefaultRoutePriority.
type BGPFilterRule struct {
	Action        string                 `json:"action"`
	MatchOperator string                 `json:"matchOperator,omitempty"`
	CIDR          string                 `json:"cidr,omitempty"`
	PrefixLength  *BGPFilterPrefixLength `json:"prefixLength,omitempty"`
	Source        string                 `json:"source,omitempty"`
	PeerType      string                 `json:"peerType,omitempty"`
	Communities   *BGPFilterCommunities  `json:"communities,omitempty"`
	ASPathPrefix  []ASNumber             `json:"asPathPrefix,omitempty"`
	Interface     string                 `json:"interface,omitempty"`
	Priority      *uint32                `json:"priority,omitempty"`
	// Operations change an accepted route, in order.
	Operations []BGPFilterOperation `json:"operations,omitempty"`
}

// BGPFilterPrefixLength bounds the prefix length of routes an In (or
// NotIn) rule matches; unset bounds are the CIDR's length and the
// family's full length.
type BGPFilterPrefixLength struct {
	Min *int32 `json:"min,omitempty"`
	Max *int32 `json:"max,omitempty"`
}

// BGPFilterCommunities matches routes carrying a community; Calico
// allows exactly one value.
type BGPFilterCommunities struct {
	Values []string `json:"values"`
}

// BGPFilterOperation is one change to an accepted route; exactly one
// field is set.
type BGPFilterOperation struct {
	AddCommunity  *BGPFilterAddCommunity  `json:"addCommunity,omitempty"`
	PrependASPath *BGPFilterPrependASPath `json:"prependASPath,omitempty"`
	SetPriority   *BGPFilterSetPriority   `json:"setPriority,omitempty"`
}

// BGPFilterSetPriority gives the route this route priority (its
// LOCAL_PREF becomes LocalPrefForPriority(Value)): on import, the kernel
// metric felix programs the route at.
type BGPFilterSetPriority struct {
	Value uint32 `json:"value"`
}

// BGPFilterAddCommunity adds a standard ("AS:value") or large
// ("AS:data1:data2") community.
type BGPFilterAddCommunity struct {
	Value string `json:"value"`
}

// BGPFilterPrependASPath puts Prefix in front of the AS path: [a, b]
// makes "a b <path>".
type BGPFilterPrependASPath struct {
	Prefix []ASNumber `json:"prefix"`
}

// Filter actions, match operators, sources and peer types.
const (
	FilterAccept           = "Accept"
	FilterReject           = "Reject"
	MatchEqual             = "Equal"
	MatchNotEqual          = "NotEqual"
	MatchIn                = "In"
	MatchNotIn             = "NotIn"
	FilterSourceRemotePeer = "RemotePeers"
	FilterPeerEBGP         = "eBGP"
	FilterPeerIBGP         = "iBGP"
)

// GetKind implements Resource.
func (f *BGPFilter) GetKind() Kind { return KindBGPFilter }

// Meta implements Resource.
func (f *BGPFilter) Meta() *ObjectMeta { return &f.Metadata }

func (f *BGPFilter) setDefaults() {}

// Validate implements Resource.
func (f *BGPFilter) Validate() error {
	var v errs
	validateName(&v, f.Metadata.Name)
	for _, l := range []struct {
		field string
		rules []BGPFilterRule
		v6    bool
	}{{"spec.exportV4", f.Spec.ExportV4, false}, {"spec.importV4", f.Spec.ImportV4, false},
		{"spec.exportV6", f.Spec.ExportV6, true}, {"spec.importV6", f.Spec.ImportV6, true}} {
		for i, r := range l.rules {
			validateFilterRule(&v, indexed(l.field, i), r, l.v6)
		}
	}
	return v.result(KindBGPFilter, f.Metadata.Name)
}

func validateFilterRule(v *errs, field string, r BGPFilterRule, v6 bool) {
	if r.Action != FilterAccept && r.Action != FilterReject {
		v.add(field+".action", r.Action, "must be Accept or Reject")
	}
	bits := 32
	if v6 {
		bits = 128
	}
	var cidr netip.Prefix
	switch {
	case r.CIDR == "" && r.MatchOperator == "":
		if r.PrefixLength != nil {
			v.add(field+".prefixLength", nil, "needs cidr and matchOperator")
		}
	case r.CIDR == "" || r.MatchOperator == "":
		v.add(field, r, "cidr and matchOperator go together")
	default:
		p, err := netip.ParsePrefix(r.CIDR)
		if err != nil || p.Addr().Is6() != v6 || p.Addr().Zone() != "" || p.Addr().Is4In6() {
			v.add(field+".cidr", r.CIDR, "is not a CIDR of this rule list's family")
		} else {
			cidr = p
		}
		switch r.MatchOperator {
		case MatchEqual, MatchNotEqual, MatchIn, MatchNotIn:
		default:
			v.add(field+".matchOperator", r.MatchOperator, "must be Equal, NotEqual, In or NotIn")
		}
	}
	if pl := r.PrefixLength; pl != nil && cidr.IsValid() {
		lo, hi := int32(cidr.Bits()), int32(bits)
		if pl.Min != nil {
			lo = *pl.Min
		}
		if pl.Max != nil {
			hi = *pl.Max
		}
		if lo < 0 || hi > int32(bits) || lo > hi {
			v.add(field+".prefixLength", fmt.Sprintf("min %d max %d", lo, hi), "needs 0 <= min <= max <= %d", bits)
		}
	}
	if r.Source != "" && r.Source != FilterSourceRemotePeer {
		v.add(field+".source", r.Source, "must be RemotePeers (or unset)")
	}
	if r.PeerType != "" && r.PeerType != FilterPeerEBGP && r.PeerType != FilterPeerIBGP {
		v.add(field+".peerType", r.PeerType, "must be eBGP or iBGP (or unset)")
	}
	if c := r.Communities; c != nil {
		if len(c.Values) != 1 {
			v.add(field+".communities.values", c.Values, "must hold exactly one community")
		}
		for _, val := range c.Values {
			if _, err := ParseCommunity(val); err != nil {
				v.add(field+".communities.values", val, "%v", err)
			}
		}
	}
	if r.Interface != "" && !validIfaceGlob(r.Interface) {
		v.add(field+".interface", r.Interface, "must be an interface name or a glob of one (* and ?), at most 15 characters")
	}
	for j, asn := range r.ASPathPrefix {
		validateASN(v, indexed(field+".asPathPrefix", j), asn, false)
	}
	// A priority match compares LOCAL_PREF exactly, as Calico's BIRD
	// does, so it takes Calico's whole range.
	if r.Priority != nil && (*r.Priority < 1 || *r.Priority > MaxLocalPref-1) {
		v.add(field+".priority", *r.Priority, "must be 1 to %d", MaxLocalPref-1)
	}
	if len(r.Operations) > 0 && r.Action != FilterAccept {
		v.add(field+".operations", nil, "only a rule with action Accept may have operations")
	}
	if len(r.Operations) > 10 {
		v.add(field+".operations", len(r.Operations), "at most 10 operations")
	}
	for j, op := range r.Operations {
		of := indexed(field+".operations", j)
		set := 0
		for _, b := range []bool{op.AddCommunity != nil, op.PrependASPath != nil, op.SetPriority != nil} {
			if b {
				set++
			}
		}
		switch {
		case set != 1:
			v.add(of, nil, "set exactly one of addCommunity, prependASPath and setPriority")
		case op.SetPriority != nil:
			if p := op.SetPriority.Value; p < 1 || p > MaxRoutePriority {
				v.add(of+".setPriority.value", p, "must be 1 to %d (routed reads a LOCAL_PREF below %d as the default priority)", MaxRoutePriority, LocalPrefForPriority(MaxRoutePriority))
			}
		case op.AddCommunity != nil:
			if _, err := ParseCommunity(op.AddCommunity.Value); err != nil {
				v.add(of+".addCommunity.value", op.AddCommunity.Value, "%v", err)
			}
		default:
			if n := len(op.PrependASPath.Prefix); n < 1 || n > 10 {
				v.add(of+".prependASPath.prefix", op.PrependASPath.Prefix, "must hold 1 to 10 AS numbers")
			}
			for k, asn := range op.PrependASPath.Prefix {
				validateASN(v, indexed(of+".prependASPath.prefix", k), asn, false)
			}
		}
	}
}

// validIfaceGlob reports whether g is an interface name pattern: at most
// 15 characters (the kernel's limit), no '/' or whitespace, and a valid
// glob.
func validIfaceGlob(g string) bool {
	if len(g) > 15 || strings.ContainsAny(g, "/ \t\n") {
		return false
	}
	_, err := path.Match(g, "")
	return err == nil
}
