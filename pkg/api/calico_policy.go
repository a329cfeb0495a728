package api

// policyFields are the Calico fields of policies and profiles routed
// has no field for. Each refused one would, if ignored, let through
// traffic the policy was written to stop, or filter pods the policy
// never applied to.
func policyFields(global bool) []calicoField {
	var out []calicoField
	if global {
		out = append(out,
			calicoField{path: "spec.doNotTrack", refuse: whenTrue("doNotTrack policies apply to host endpoints before conntrack, and routed has no host endpoints: applied as an ordinary policy it would filter pods it never filtered")},
			calicoField{path: "spec.preDNAT", refuse: whenTrue("preDNAT policies apply to host endpoints before DNAT, and routed has no host endpoints: applied as an ordinary policy it would filter pods it never filtered")},
			calicoField{path: "spec.applyOnForward", note: "it concerns traffic forwarded through host endpoints, which routed does not have"},
		)
	}
	return append(out, ruleFields()...)
}

// ruleFields refuses the rule matches routed cannot enforce, in both
// directions.
func ruleFields() []calicoField {
	var out []calicoField
	for _, dir := range []string{"spec.ingress[]", "spec.egress[]"} {
		out = append(out, calicoField{path: dir + ".http",
			refuse: always("HTTP matches need an application-layer proxy, which routed does not run: without it the rule would match every request to the port")})
		for _, end := range []string{".source", ".destination"} {
			out = append(out, calicoField{path: dir + end + ".services",
				refuse: always("routed does not read Kubernetes Services: the rule would match every endpoint instead of the service's; match the service's pods with a selector")})
		}
	}
	return out
}
