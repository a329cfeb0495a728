package migrate

import (
	"fmt"
	"maps"
	"strings"

	"github.com/routed-net/routed/pkg/api"
)

// NarrowedAnnotation, on a resource the migration wrote, says what was
// changed in it so that it could be carried, each change narrower than
// Calico's (narrowHTTP): routed denies at least what Calico denied.
const NarrowedAnnotation = "routed.io/migrate-narrowed"

// narrowHTTP returns a copy of the Calico policy or profile obj in which
// every rule with an HTTP match (which routed cannot enforce: it runs no
// application-layer proxy, and pkg/api refuses the field) is rewritten
// to deny at least what Calico denied, with one line per change:
//
//   - an Allow rule is dropped: it allowed some requests to its L3/L4
//     match, now none; that traffic meets the rules after it and the
//     default deny, so it can only be allowed by what would allow it
//     anyway.
//   - a Log rule is dropped: it never decided a verdict.
//   - a Deny rule keeps its L3/L4 match without the HTTP match: it now
//     denies every request there, not only the matching ones.
//
// The policy's types are pinned to those Calico inferred from its rule
// lists, so that a list emptied by a dropped rule keeps its direction's
// default deny. A Pass rule with an HTTP match has no narrower form
// (dropping it lets its traffic meet its tier's later rules, which may
// allow it), nor does a doNotTrack or preDNAT policy (their allows
// interact with connection tracking and with the normal policy after
// them): obj is then returned unchanged, with no lines, and decoding
// refuses it naming the field. obj itself is never modified.
func narrowHTTP(k api.Kind, obj map[string]any) (map[string]any, []string) {
	switch k {
	case api.KindGlobalNetworkPolicy, api.KindNetworkPolicy, api.KindProfile:
	default:
		return obj, nil
	}
	spec, _ := obj["spec"].(map[string]any)
	if spec == nil || spec["doNotTrack"] == true || spec["preDNAT"] == true {
		return obj, nil
	}
	newSpec := maps.Clone(spec)
	var lines []string
	for _, dir := range []string{"ingress", "egress"} {
		rules, _ := spec[dir].([]any)
		var kept []any
		changed := false
		for i, x := range rules {
			rule, _ := x.(map[string]any)
			if _, has := rule["http"]; !has {
				kept = append(kept, x)
				continue
			}
			where := fmt.Sprintf("spec.%s[%d]", dir, i)
			switch rule["action"] {
			case string(api.ActionAllow):
				lines = append(lines, fmt.Sprintf("%s (Allow with an HTTP match) dropped: routed cannot tell HTTP requests apart, so the requests it allowed meet the rules after it and the default deny", where))
			case string(api.ActionLog):
				lines = append(lines, fmt.Sprintf("%s (Log with an HTTP match) dropped: its traffic is no longer logged; no verdict changes", where))
			case string(api.ActionDeny):
				r := maps.Clone(rule)
				delete(r, "http")
				kept = append(kept, r)
				lines = append(lines, fmt.Sprintf("%s (Deny with an HTTP match) kept without its HTTP match: it denies every request its other matches select, not only the matching ones", where))
			default:
				return obj, nil
			}
			changed = true
		}
		if !changed {
			continue
		}
		if len(kept) == 0 {
			// Absent, not empty: routed stores an empty list as none, and a
			// second run must find the same spec.
			delete(newSpec, dir)
		} else {
			newSpec[dir] = kept
		}
	}
	if len(lines) == 0 {
		return obj, nil
	}
	if k != api.KindProfile {
		if types, _ := spec["types"].([]any); len(types) == 0 {
			newSpec["types"] = inferredTypes(spec)
		}
	}
	out := maps.Clone(obj)
	out["spec"] = newSpec
	md, _ := obj["metadata"].(map[string]any)
	md = maps.Clone(md)
	if md == nil {
		md = map[string]any{}
	}
	ann, _ := md["annotations"].(map[string]any)
	ann = maps.Clone(ann)
	if ann == nil {
		ann = map[string]any{}
	}
	ann[NarrowedAnnotation] = strings.Join(lines, "; ")
	md["annotations"] = ann
	out["metadata"] = md
	return out, lines
}

// inferredTypes are the policy types Calico (and routed, PolicySpec's
// defaults) infer for a Calico policy spec that gives none, from the
// rule lists it has: both, Egress alone, or Ingress.
func inferredTypes(spec map[string]any) []any {
	in, _ := spec["ingress"].([]any)
	eg, _ := spec["egress"].([]any)
	switch {
	case len(in) > 0 && len(eg) > 0:
		return []any{string(api.PolicyTypeIngress), string(api.PolicyTypeEgress)}
	case len(eg) > 0:
		return []any{string(api.PolicyTypeEgress)}
	}
	return []any{string(api.PolicyTypeIngress)}
}
