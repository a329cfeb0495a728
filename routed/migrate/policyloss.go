package migrate

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sort"
	"strings"

	"github.com/routed-net/routed/pkg/api"
)

// ErrPolicyLoss means Calico resources that enforce or shape policy
// cannot be carried, and the run was not told to accept their loss
// (Options.AcceptPolicyLoss): nothing was written. Without them routed
// would allow traffic Calico stops.
var ErrPolicyLoss = errors.New("migrate: Calico policy cannot be carried without weakening it")

// PolicyLoss is one Calico resource that enforces or shapes policy and
// cannot be carried: what it is, why it cannot be carried, and what
// routed would allow without it.
type PolicyLoss struct {
	// Kind is Calico's kind (or, for a kind routed does not know, its
	// plural).
	Kind string
	// Name is the name routedctl would show it by ("<namespace>.<name>"
	// for a namespaced kind, as in Report.Items).
	Name string
	// Reason is why it cannot be carried (the refused field, the
	// missing tier).
	Reason string
	// Consequence is what changes once it is missing.
	Consequence string
}

func (l PolicyLoss) String() string {
	return fmt.Sprintf("%s %s cannot be carried (%s): %s", l.Kind, l.Name, l.Reason, l.Consequence)
}

// Narrowing is a Calico resource carried with changes that make routed
// deny at least what Calico denied (narrowHTTP); the resource carries
// them in NarrowedAnnotation too.
type Narrowing struct {
	Kind   api.Kind
	Name   string
	Change string
}

// refused records a Calico object of kind k that could not be
// converted (err): a policy loss when it enforces or shapes policy, a
// notice otherwise. obj is the object as read (nil if it was not even
// JSON), where names it.
func (st *calicoState) refused(k api.Kind, obj map[string]any, where string, err error) {
	if why := lossConsequence(k, obj); why != "" {
		st.losses = append(st.losses, PolicyLoss{Kind: string(k), Name: objectStoreName(k, obj, where), Reason: err.Error(), Consequence: why})
		return
	}
	if staged(k) {
		st.skipped = append(st.skipped, fmt.Sprintf("%s: %v (a staged policy is not enforced: no verdict changes)", k, err))
		return
	}
	st.skipped = append(st.skipped, fmt.Sprintf("%s: %v", k, err))
}

// convert reads one Calico object as routed's resource, narrowed where
// narrowHTTP has a narrower form, and records what it could not read
// (refused). It returns nil when the object was not carried.
func (st *calicoState) convert(k api.Kind, obj map[string]any, where string) api.Resource {
	r, warnings, changes, err := convertCalico(k, obj, where)
	if err != nil {
		st.refused(k, obj, where, err)
		return nil
	}
	st.warnings = append(st.warnings, warnings...)
	for _, c := range changes {
		st.narrowed = append(st.narrowed, Narrowing{Kind: k, Name: api.StoreName(r), Change: c})
	}
	return r
}

// ConvertCalico reads one Calico v3 object of kind k (its JSON as a
// map; not modified) as the migration carries it: narrowed where a
// narrower form exists, with one line per change, or refused naming the
// field. Exported so that the narrowed forms can be proved against real
// traffic where the dataplane's test harness lives (felix/policy).
func ConvertCalico(k api.Kind, obj map[string]any) (api.Resource, []string, error) {
	r, _, changes, err := convertCalico(k, obj, "Calico "+string(k))
	return r, changes, err
}

func convertCalico(k api.Kind, obj map[string]any, where string) (api.Resource, []string, []string, error) {
	narrowed, changes := narrowHTTP(k, obj)
	// decodeCalicoObject sets the top level's apiVersion and kind.
	r, warnings, err := decodeCalicoObject(k, maps.Clone(narrowed), where)
	if err != nil {
		return nil, nil, nil, err
	}
	return r, warnings, changes, nil
}

func staged(k api.Kind) bool {
	switch k {
	case api.KindStagedGlobalNetworkPolicy, api.KindStagedNetworkPolicy, api.KindStagedKubernetesNetworkPolicy:
		return true
	}
	return false
}

// lossConsequence says what routed would allow that Calico stops if the
// Calico object of kind k (as read; nil if unreadable) were left out,
// or "" when leaving it out changes no verdict. Enforcing or shaping
// policy: both policy kinds, tiers, profiles, network sets, host
// endpoints, and a FelixConfiguration setting what policy leaves open
// (felixLoss). Not: staged policies (never enforced), pools, BGP,
// nodes, reservations, IPAM, endpoints (felix drops the traffic of a
// pod interface it has no endpoint for).
func lossConsequence(k api.Kind, obj map[string]any) string {
	spec, _ := obj["spec"].(map[string]any)
	md, _ := obj["metadata"].(map[string]any)
	switch k {
	case api.KindGlobalNetworkPolicy, api.KindNetworkPolicy:
		return policyLoss(spec)
	case api.KindTier:
		action, _ := spec["defaultAction"].(string)
		if action == "" {
			action = string(api.ActionDeny)
		}
		return fmt.Sprintf("its policies cannot be carried either (each is listed, if any) and its default action (%s) would not apply: traffic they and the tier's end denied would be allowed", action)
	case api.KindProfile:
		return "the endpoints naming it would lose its rules and the labels it applies (labelsToApply): traffic its rules denied would be allowed, and policy selecting those endpoints by those labels would no longer apply to them"
	case api.KindGlobalNetworkSet, api.KindNetworkSet:
		labels, _ := md["labels"].(map[string]any)
		return fmt.Sprintf("policy rules selecting its addresses %v by its labels %v would no longer match them: traffic a Deny rule denied to or from them would be allowed", spec["nets"], labels)
	case api.KindHostEndpoint:
		return fmt.Sprintf("node %v's interface %q (expected addresses %v) would not be policed: traffic to and from the host that policy denied would be allowed", spec["node"], fmt.Sprint(spec["interfaceName"]), spec["expectedIPs"])
	case api.KindFelixConfiguration:
		return felixLoss(spec)
	}
	return ""
}

// policyLoss is what a Calico policy's absence allows, from its spec.
func policyLoss(spec map[string]any) string {
	var parts []string
	count := ruleActions(spec)
	if n := count[string(api.ActionDeny)]; n > 0 {
		parts = append(parts, fmt.Sprintf("traffic its %d Deny rule(s) denied would be allowed", n))
	}
	types, _ := spec["types"].([]any)
	if len(types) == 0 {
		types = inferredTypes(spec)
	}
	ts := make([]string, len(types))
	for i, t := range types {
		ts[i] = fmt.Sprint(t)
	}
	sel, _ := spec["selector"].(string)
	if sel == "" {
		sel = "all()"
	}
	parts = append(parts, fmt.Sprintf("the endpoints it selects (%s) would lose the default deny it gives their %s traffic (those no other policy selects would accept all of it)",
		sel, strings.ToLower(strings.Join(ts, " and "))))
	if n := count[string(api.ActionPass)]; n > 0 {
		parts = append(parts, fmt.Sprintf("traffic its %d Pass rule(s) sent to later tiers would be judged in its own tier", n))
	}
	return "it would no longer apply: " + strings.Join(parts, "; ")
}

// ruleActions counts a policy spec's ingress and egress rules by action.
func ruleActions(spec map[string]any) map[string]int {
	count := map[string]int{}
	for _, dir := range []string{"ingress", "egress"} {
		rules, _ := spec[dir].([]any)
		for _, x := range rules {
			rule, _ := x.(map[string]any)
			a, _ := rule["action"].(string)
			count[a]++
		}
	}
	return count
}

// felixPolicyFields are the FelixConfiguration fields that decide what
// policy leaves open or what leaves a node in clear, with what leaving
// them out allows; each applies when set to other than what routed does
// without it.
var felixPolicyFields = map[string]struct {
	applies func(v any) bool
	allows  string
}{
	"failsafeInboundHostPorts":  {func(v any) bool { return v != nil }, "routed's default failsafe ports would replace these: host ports Calico kept closed may open"},
	"failsafeOutboundHostPorts": {func(v any) bool { return v != nil }, "routed's default outbound failsafe ports would replace these: connections from the host Calico's policy stopped may go out"},
	// defaultEndpointToHostAction is not here: calico-node's environment
	// overrides every FelixConfiguration, so checkFelixEnv (felixenv.go)
	// judges each one's value once all are read and the environment is.
	"wireguardEnabled":               {func(v any) bool { return v == true }, "IPv4 pod traffic between nodes would go in clear unless routed runs with --wireguard"},
	"wireguardEnabledV6":             {func(v any) bool { return v == true }, "IPv6 pod traffic between nodes would go in clear unless routed runs with --wireguard-v6"},
	"wireguardHostEncryptionEnabled": {func(v any) bool { return v == true }, "host traffic between nodes would go in clear unless routed runs with --wireguard-host-encryption"},
}

// felixLoss is what leaving out a FelixConfiguration spec allows, ""
// when it sets none of felixPolicyFields.
func felixLoss(spec map[string]any) string {
	var out []string
	for name, f := range felixPolicyFields {
		if v, ok := spec[name]; ok && f.applies(v) {
			b, _ := json.Marshal(v)
			out = append(out, fmt.Sprintf("%s %s would not apply: %s", name, b, f.allows))
		}
	}
	sort.Strings(out)
	return strings.Join(out, "; ")
}

// objectStoreName is the name routedctl would show obj by, or where when
// obj has none.
func objectStoreName(k api.Kind, obj map[string]any, where string) string {
	md, _ := obj["metadata"].(map[string]any)
	name, _ := md["name"].(string)
	if name == "" {
		return where
	}
	ns, _ := md["namespace"].(string)
	return api.NamespacedName(k, ns, name)
}

// resourceObject is r as a Calico-shaped object, for lossConsequence.
func resourceObject(r api.Resource) map[string]any {
	var obj map[string]any
	if b, err := json.Marshal(r); err == nil {
		_ = json.Unmarshal(b, &obj)
	}
	return obj
}

// policyLossError is ErrPolicyLoss naming each loss.
func policyLossError(losses []PolicyLoss) error {
	names := make([]string, len(losses))
	for i, l := range losses {
		names[i] = l.Kind + " " + l.Name
	}
	return fmt.Errorf("%w: %d Calico resource(s) enforcing or shaping policy cannot be carried (%s); nothing was written", ErrPolicyLoss, len(losses), strings.Join(names, ", "))
}
