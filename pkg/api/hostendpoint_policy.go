package api

// validateHost checks the host-endpoint fields of a GlobalNetworkPolicy
// as Calico does: doNotTrack and preDNAT policies must also be
// applyOnForward (they see forwarded traffic whatever the flag says, so
// Calico makes the user say so), are not both set, and a preDNAT policy
// has no egress side (DNAT happens on the way in).
func (s *GlobalNetworkPolicySpec) validateHost(v *errs) {
	if s.DoNotTrack && s.PreDNAT {
		v.add("spec.preDNAT", true, "cannot be set with spec.doNotTrack: a policy runs either before connection tracking or before DNAT")
	}
	if s.HostOnly() && !s.ApplyOnForward {
		field := "spec.doNotTrack"
		if s.PreDNAT {
			field = "spec.preDNAT"
		}
		v.add("spec.applyOnForward", false, "must be true when %s is: such policies see forwarded traffic too", field)
	}
	if !s.PreDNAT {
		return
	}
	if len(s.Egress) > 0 {
		v.add("spec.egress", nil, "must be empty when spec.preDNAT is true: pre-DNAT policy applies to traffic arriving at the host only")
	}
	for i, t := range s.Types {
		if t == PolicyTypeEgress {
			v.add(indexed("spec.types", i), t, "cannot be Egress when spec.preDNAT is true: pre-DNAT policy applies to traffic arriving at the host only")
		}
	}
}
