package k8spod

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
)

// Annotation prefixes: Calico's, so existing manifests work, and
// routed's own. Both may be set only if they agree.
const (
	CalicoPrefix = "cni.projectcalico.org/"
	RoutedPrefix = "routed.io/"
)

// Annotation names after the prefix.
const (
	// AnnotIPAddrs is a JSON list holding the pod's fixed IPv4 address,
	// e.g. ["10.244.1.5"]; read from the pod only.
	AnnotIPAddrs = "ipAddrs"
	// AnnotIPv4Pools is a JSON list of IP pool names or CIDRs to assign
	// from, in order; read from the pod, else from its namespace.
	AnnotIPv4Pools = "ipv4pools"
	// annotIPAddrsNoIPAM is Calico's "address without IPAM", which
	// routed does not offer: refused rather than silently ignored.
	annotIPAddrsNoIPAM = "ipAddrsNoIpam"
)

// Request is what a pod's (and its namespace's) annotations ask of
// IPAM.
type Request struct {
	// IP is the fixed address, invalid when none is asked for.
	IP netip.Addr
	// Pools restricts assignment to these pools; nil when not set.
	Pools []string
	// PoolsFrom says where Pools came from, for the log.
	PoolsFrom string
}

// lookup returns the value of an annotation under either prefix. A
// value under both must be the same. Errors wrap ErrAnnotation.
func lookup(annots map[string]string, name, owner string) (string, string, error) {
	cv, cok := annots[CalicoPrefix+name]
	rv, rok := annots[RoutedPrefix+name]
	switch {
	case cok && rok && strings.TrimSpace(cv) != strings.TrimSpace(rv):
		return "", "", fmt.Errorf("%w: %s has both %s%s=%s and %s%s=%s; remove one", ErrAnnotation, owner, CalicoPrefix, name, cv, RoutedPrefix, name, rv)
	case rok:
		return rv, RoutedPrefix + name, nil
	case cok:
		return cv, CalicoPrefix + name, nil
	}
	return "", "", nil
}

// stringList decodes a JSON list of non-empty strings.
func stringList(value, key, owner string) ([]string, error) {
	var list []string
	if err := json.Unmarshal([]byte(value), &list); err != nil {
		return nil, fmt.Errorf("%w: %s annotation %s=%s is not a JSON list of strings (e.g. [\"10.244.1.5\"]): %v", ErrAnnotation, owner, key, value, err)
	}
	if len(list) == 0 {
		return nil, fmt.Errorf("%w: %s annotation %s is an empty list; remove it or name at least one entry", ErrAnnotation, owner, key)
	}
	for i, s := range list {
		list[i] = strings.TrimSpace(s)
		if list[i] == "" {
			return nil, fmt.Errorf("%w: %s annotation %s=%s holds an empty string", ErrAnnotation, owner, key, value)
		}
	}
	return list, nil
}

// ParseIPAddrs reads the fixed-address annotation of a pod. routed is
// IPv4-only and gives a pod one address, so the list must hold exactly
// one IPv4 address (a /32 prefix is accepted too).
func ParseIPAddrs(annots map[string]string, owner string) (netip.Addr, error) {
	if _, key, _ := lookup(annots, annotIPAddrsNoIPAM, owner); key != "" {
		return netip.Addr{}, fmt.Errorf("%w: %s annotation %s is not supported by routed (every address comes from routed-ipam); use %s%s instead", ErrAnnotation, owner, key, RoutedPrefix, AnnotIPAddrs)
	}
	value, key, err := lookup(annots, AnnotIPAddrs, owner)
	if err != nil || key == "" {
		return netip.Addr{}, err
	}
	list, err := stringList(value, key, owner)
	if err != nil {
		return netip.Addr{}, err
	}
	if len(list) > 1 {
		return netip.Addr{}, fmt.Errorf("%w: %s annotation %s=%s names %d addresses; routed assigns a pod one IPv4 address", ErrAnnotation, owner, key, value, len(list))
	}
	a, err := netip.ParseAddr(list[0])
	if err != nil {
		p, perr := netip.ParsePrefix(list[0])
		if perr != nil || !p.IsSingleIP() {
			return netip.Addr{}, fmt.Errorf("%w: %s annotation %s: %q is not an IP address", ErrAnnotation, owner, key, list[0])
		}
		a = p.Addr()
	}
	if !a.Is4() {
		return netip.Addr{}, fmt.Errorf("%w: %s annotation %s: %s is not IPv4; routed is IPv4-only", ErrAnnotation, owner, key, a)
	}
	return a, nil
}

// ParsePools reads the pool annotation of a pod or namespace: pool names
// or IPv4 CIDRs. Whether a name or CIDR matches a pool is IPAM's to say.
func ParsePools(annots map[string]string, owner string) ([]string, error) {
	value, key, err := lookup(annots, AnnotIPv4Pools, owner)
	if err != nil || key == "" {
		return nil, err
	}
	list, err := stringList(value, key, owner)
	if err != nil {
		return nil, err
	}
	for _, s := range list {
		if !strings.Contains(s, "/") {
			continue
		}
		if p, err := netip.ParsePrefix(s); err != nil || !p.Addr().Is4() {
			return nil, fmt.Errorf("%w: %s annotation %s: %q is neither a pool name nor an IPv4 CIDR", ErrAnnotation, owner, key, s)
		}
	}
	return list, nil
}
