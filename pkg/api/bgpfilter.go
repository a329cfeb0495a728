package api

import "net/netip"

// BGPFilter holds import and export rules for the BGP sessions of the
// BGPPeers that name it in spec.filters (Calico's BGPFilter). Rules are
// tried in order; the first whose CIDR matches decides; a route no rule
// matches is accepted.
type BGPFilter struct {
	TypeMeta `json:",inline"`
	Metadata ObjectMeta    `json:"metadata"`
	Spec     BGPFilterSpec `json:"spec"`
}

// BGPFilterSpec lists the rules per direction and family. routed routes
// IPv4 only: IPv6 rules are accepted and have nothing to act on.
type BGPFilterSpec struct {
	ExportV4 []BGPFilterRule `json:"exportV4,omitempty"`
	ImportV4 []BGPFilterRule `json:"importV4,omitempty"`
	ExportV6 []BGPFilterRule `json:"exportV6,omitempty"`
	ImportV6 []BGPFilterRule `json:"importV6,omitempty"`
}

// BGPFilterRule accepts or rejects routes whose prefix matches CIDR:
// Equal (exactly it), NotEqual, In (it or inside it), NotIn.
type BGPFilterRule struct {
	Action        string `json:"action"`
	MatchOperator string `json:"matchOperator,omitempty"`
	CIDR          string `json:"cidr,omitempty"`
}

// Filter actions and match operators.
const (
	FilterAccept  = "Accept"
	FilterReject  = "Reject"
	MatchEqual    = "Equal"
	MatchNotEqual = "NotEqual"
	MatchIn       = "In"
	MatchNotIn    = "NotIn"
	bgpFilterIPv6 = true
	bgpFilterIPv4 = false
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
			field := indexed(l.field, i)
			if r.Action != FilterAccept && r.Action != FilterReject {
				v.add(field+".action", r.Action, "must be Accept or Reject")
			}
			switch {
			case r.CIDR == "" && r.MatchOperator == "":
				// matches every route
			case r.CIDR == "" || r.MatchOperator == "":
				v.add(field, r, "cidr and matchOperator go together")
			default:
				if p, err := netip.ParsePrefix(r.CIDR); err != nil || p.Addr().Is6() != l.v6 {
					v.add(field+".cidr", r.CIDR, "is not a CIDR of this rule list's family")
				}
				switch r.MatchOperator {
				case MatchEqual, MatchNotEqual, MatchIn, MatchNotIn:
				default:
					v.add(field+".matchOperator", r.MatchOperator, "must be Equal, NotEqual, In or NotIn")
				}
			}
		}
	}
	return v.result(KindBGPFilter, f.Metadata.Name)
}
