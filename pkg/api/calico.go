package api

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// calicoField says what routed does with one Calico field that routed
// has no field of its own for (fields routed implements are read as its
// own). A value refuse objects to makes the file an error naming why:
// ignoring it would change routing or security. Any other value is
// dropped, with a warning carrying note (silently when note is empty:
// the value is what routed does anyway). honour, when set, carries the
// value over into routed's fields first.
type calicoField struct {
	path   string // dotted; "[]" after a key visits each list element
	refuse func(v any) string
	note   string
	honour func(spec map[string]any, v any)
	// quiet, when set, drops the values it accepts without the note
	// (they are what routed does anyway).
	quiet func(v any) bool
}

// calicoFields is the table of Calico v3 fields routed reads without a
// field of its own, per kind (TestCalicoFieldTable checks each verdict
// against real Calico files).
var calicoFields = map[Kind][]calicoField{
	KindIPPool: {
		{path: "spec.allowedUses", note: "routed uses every pool for workloads and tunnel addresses",
			refuse: func(v any) string {
				if !listHas(v, "Workload") {
					return "routed gives pods addresses from every enabled pool; a pool not allowed for Workload would hand them out"
				}
				return ""
			}},
		{path: "spec.assignmentMode", refuse: unless("Automatic", "routed assigns addresses from every enabled pool automatically; a Manual pool would be handed out to any pod")},
		{path: "spec.namespaceSelector", refuse: unless("all()", "routed does not choose pools by namespace; pods of every namespace would get addresses from this pool")},
		{path: "spec.ipip", refuse: always("a Calico v1 field (Calico v3 refuses it too): use ipipMode")},
		{path: "spec.nat-outgoing", refuse: always("a Calico v1 field (Calico v3 refuses it too): use natOutgoing")},
	},
	KindBGPConfiguration: {
		{path: "spec.ignoredInterfaces", note: "routed's address autodetection does not read it (set --ip or IP_AUTODETECTION_METHOD)"},
		{path: "spec.nodeMeshPeerPassword", note: "not a Calico v3 field; the mesh password is nodeMeshPassword"},
		{path: "spec.programClusterRoutes", note: "whether BIRD or felix programs the routes to other nodes' blocks; in routed felix always programs them (learned over BGP, VXLAN pools from the datastore), as Calico's Disabled with felix's programClusterRoutes Enabled does",
			quiet: func(v any) bool { return v == "Enabled" }},
		{path: "spec.serviceLoadBalancerAggregation", refuse: unless("Enabled", "routed advertises serviceLoadBalancerIPs as the configured CIDRs, not per-service /32s")},
		{path: "spec.ipv4NormalRoutePriority", note: "routed programs routes with protocol 82 at the kernel's default priority", refuse: unlessNumber(1024, routePriorityWhy)},
		{path: "spec.ipv6NormalRoutePriority", note: "routed programs routes with protocol 82 at the kernel's default priority", refuse: unlessNumber(1024, routePriorityWhy)},
		{path: "spec.ipv4ElevatedRoutePriority", note: "routed programs routes with protocol 82 at the kernel's default priority", refuse: unlessNumber(512, routePriorityWhy)},
		{path: "spec.ipv6ElevatedRoutePriority", note: "routed programs routes with protocol 82 at the kernel's default priority", refuse: unlessNumber(512, routePriorityWhy)},
	},
	KindBGPPeer: {
		{path: "spec.failureDetectionMode", refuse: unless("None", "routed runs no BFD: a failed peer would be noticed only after the BGP hold time, and traffic sent to it meanwhile lost")},
		{path: "spec.restartMode", refuse: unless("GracefulRestart", "routed's sessions use plain graceful restart: the peer's routes would be dropped when maxRestartTime runs out instead of kept as long-lived stale routes")},
		{path: "spec.birdGatewayMode", note: "routed installs each route a peer sends with its next hop as the gateway; BIRD's gateway mode has no counterpart", refuse: func(v any) string {
			if v != "Recursive" && v != "DirectIfDirectlyConnected" {
				return "must be Recursive or DirectIfDirectlyConnected"
			}
			return ""
		}},
	},
	KindNode: {
		{path: "spec.orchRefs", note: "routed names nodes by their Kubernetes node name"},
		{path: "spec.addresses", note: "routed reads the node's address from spec.bgp.ipv4Address"},
		{path: "status", note: "status is written by the node, not applied"},
	},
	KindGlobalNetworkPolicy: policyFields(true),
	KindNetworkPolicy:       policyFields(false),
	KindProfile:             ruleFields(),
	KindTier:                {{path: "status", note: "status is written by Calico's controllers, not applied"}},
	KindFelixConfiguration:  felixCalicoFields(),
}

const routePriorityWhy = "routed programs routes with protocol 82 at the kernel's default priority; another priority would change which route wins"

func always(why string) func(any) string { return func(any) string { return why } }

func whenTrue(why string) func(any) string {
	return func(v any) string {
		switch v {
		case true:
			return why
		case false, nil:
			return ""
		}
		return notBoolean(v, why)
	}
}

// notBoolean refuses a value that is not a boolean where one is read,
// with why the field is refused: "true" as a string would otherwise
// pass a check for true and be silently dropped (Calico refuses it as a
// type error).
func notBoolean(v any, why string) string {
	return "must be true or false, not " + renderValue(v) + "; " + why
}

// unless refuses every value but ok (and the empty string).
func unless(ok, why string) func(any) string {
	return func(v any) string {
		if v == ok || v == "" || v == nil {
			return ""
		}
		return why
	}
}

func unlessNumber(ok float64, why string) func(any) string {
	return func(v any) string {
		if n, isNum := v.(float64); isNum && n == ok {
			return ""
		}
		return why
	}
}

func listHas(v any, want string) bool {
	l, _ := v.([]any)
	return slices.Contains(l, any(want))
}

// calicoRenamed maps Calico field paths to routed's names.
var calicoRenamed = map[Kind]map[string]string{
	KindBGPConfiguration: {"spec.logSeverityScreen": "logSeverity"},
}

// fromCalico rewrites a Calico object in place into routed's shape,
// following calicoFields, and returns warnings for what it dropped, or
// an error naming a field that cannot be ignored.
func fromCalico(k Kind, obj map[string]any, where string) ([]string, error) {
	var warnings []string
	for _, f := range calicoFields[k] {
		var refused error
		visitPath(obj, f.path, "", func(parent map[string]any, key, path string) {
			v := parent[key]
			if refused != nil {
				return
			}
			if f.refuse != nil {
				if why := f.refuse(v); why != "" {
					refused = decodeErrorf("Calico field %s (%s) cannot be ignored: %s", path, renderValue(v), why)
					return
				}
			}
			if f.honour != nil {
				if spec, ok := obj["spec"].(map[string]any); ok {
					f.honour(spec, v)
				}
			}
			delete(parent, key)
			if f.note != "" && (f.quiet == nil || !f.quiet(v)) {
				warnings = append(warnings, fmt.Sprintf("%s: Calico field %s is not used by routed and was ignored: %s", objLabel(where, k, obj), path, f.note))
			}
		})
		if refused != nil {
			return nil, refused
		}
	}
	for path, to := range calicoRenamed[k] {
		if v, ok := takePath(obj, path); ok {
			if spec, ok := obj["spec"].(map[string]any); ok {
				spec[to] = v
			}
		}
	}
	// Calico exports carry server-side metadata routed does not keep.
	if md, ok := obj["metadata"].(map[string]any); ok {
		var dropped []string
		known := jsonFields(typeOfObjectMeta)
		for key := range md {
			if _, ok := known[key]; !ok {
				dropped = append(dropped, key)
				delete(md, key)
			}
		}
		sort.Strings(dropped)
		for _, d := range dropped {
			warnings = append(warnings, fmt.Sprintf("%s: metadata.%s ignored", objLabel(where, k, obj), d))
		}
		delete(md, "resourceVersion") // a Calico revision means nothing here
		delete(md, "uid")
		// Kubernetes' bookkeeping on Calico's custom resources.
		if ann, ok := md["annotations"].(map[string]any); ok {
			delete(ann, "projectcalico.org/metadata")
			delete(ann, "kubectl.kubernetes.io/last-applied-configuration")
			if len(ann) == 0 {
				delete(md, "annotations")
			}
		}
	}
	return warnings, nil
}

// visitPath calls fn for every place path (dotted, "key[]" for each
// element of a list) exists in m, with the concrete path ("spec.a[2].b").
func visitPath(m map[string]any, path, prefix string, fn func(parent map[string]any, key, concrete string)) {
	head, rest, more := strings.Cut(path, ".")
	if !more {
		if _, ok := m[head]; ok {
			fn(m, head, join(prefix, head))
		}
		return
	}
	if key, isList := strings.CutSuffix(head, "[]"); isList {
		l, _ := m[key].([]any)
		for i, e := range l {
			if em, ok := e.(map[string]any); ok {
				visitPath(em, rest, fmt.Sprintf("%s[%d]", join(prefix, key), i), fn)
			}
		}
		return
	}
	if next, ok := m[head].(map[string]any); ok {
		visitPath(next, rest, join(prefix, head), fn)
	}
}

// takePath removes and returns the value at a dotted path.
func takePath(obj map[string]any, path string) (any, bool) {
	m := obj
	keys := splitPath(path)
	for _, key := range keys[:len(keys)-1] {
		next, ok := m[key].(map[string]any)
		if !ok {
			return nil, false
		}
		m = next
	}
	last := keys[len(keys)-1]
	v, ok := m[last]
	delete(m, last)
	return v, ok
}
