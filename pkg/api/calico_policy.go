package api

// policyFields are the Calico fields of policies and profiles routed
// has no field for. Each refused one would, if ignored, let through
// traffic the policy was written to stop, or filter pods the policy
// never applied to. A GlobalNetworkPolicy's host-endpoint fields
// (doNotTrack, preDNAT, applyOnForward) are routed's own, so both kinds
// have only the rule fields here.
func policyFields(bool) []calicoField {
	return ruleFields()
}

// ruleFields refuses the rule matches routed cannot enforce, in both
// directions (services is routed's own field: EntityRule.Services).
func ruleFields() []calicoField {
	var out []calicoField
	for _, dir := range []string{"spec.ingress[]", "spec.egress[]"} {
		out = append(out, calicoField{path: dir + ".http",
			refuse: always("HTTP matches need an application-layer proxy, which routed does not run: without it the rule would match every request to the port")})
	}
	return out
}
