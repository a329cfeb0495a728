package api

import (
	"fmt"
	"sort"
)

// calicoIgnored lists Calico fields, per kind, that routed reads without
// acting on them. They become warnings rather than unknown-field errors so
// existing Calico files apply unchanged. Paths are relative to the object.
var calicoIgnored = map[Kind][]string{
	KindIPPool:           {"spec.allowedUses", "spec.disableBGPExport", "spec.assignmentMode", "spec.ipip", "spec.nat-outgoing"},
	KindBGPConfiguration: {"spec.ignoredInterfaces", "spec.localWorkloadPeeringIPV4", "spec.localWorkloadPeeringIPV6", "spec.nodeMeshPeerPassword"},
	KindBGPPeer:          {"spec.reachableBy", "spec.localWorkloadSelector", "spec.nextHopMode"},
	KindNode: {"spec.bgp.ipv6Address", "spec.bgp.ipv4VXLANTunnelAddr",
		"spec.vxlanTunnelMACAddrV6", "spec.ipv6VXLANTunnelAddr", "spec.orchRefs", "spec.addresses", "spec.wireguard", "status"},
}

// calicoRenamed maps Calico field paths to routed's names.
var calicoRenamed = map[Kind]map[string]string{
	KindBGPConfiguration: {"spec.logSeverityScreen": "logSeverity"},
}

// fromCalico rewrites a projectcalico.org/v3 object in place into routed's
// shape and returns warnings for what it dropped.
func fromCalico(k Kind, obj map[string]any, where string) []string {
	var warnings []string
	for _, path := range calicoIgnored[k] {
		if removePath(obj, path) {
			warnings = append(warnings, fmt.Sprintf("%s (%s %s): Calico field %s is not supported by routed and was ignored", where, k, nameOf(obj), path))
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
			warnings = append(warnings, fmt.Sprintf("%s (%s %s): metadata.%s ignored", where, k, nameOf(obj), d))
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
	return warnings
}

func nameOf(obj map[string]any) string {
	if md, ok := obj["metadata"].(map[string]any); ok {
		if n, ok := md["name"].(string); ok {
			return fmt.Sprintf("%q", n)
		}
	}
	return `""`
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

func removePath(obj map[string]any, path string) bool {
	_, ok := takePath(obj, path)
	return ok
}
