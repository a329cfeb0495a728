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
	// AnnotIPAddrs is a JSON list holding the pod's fixed addresses, at
	// most one per family, e.g. ["10.244.1.5", "fd00:10:244::5"]; read
	// from the pod only.
	AnnotIPAddrs = "ipAddrs"
	// AnnotIPv4Pools and AnnotIPv6Pools are JSON lists of IP pool names
	// or CIDRs to assign from, in order; read from the pod, else from
	// its namespace.
	AnnotIPv4Pools = "ipv4pools"
	AnnotIPv6Pools = "ipv6pools"
	// annotIPAddrsNoIPAM is Calico's "address without IPAM", which
	// routed does not offer: refused rather than silently ignored.
	annotIPAddrsNoIPAM = "ipAddrsNoIpam"
)

// Request is what a pod's (and its namespace's) annotations ask of
// IPAM.
type Request struct {
	// IPs are the fixed addresses, at most one per family; nil when none
	// is asked for.
	IPs []netip.Addr
	// Pools4 and Pools6 restrict assignment to these pools; nil when not
	// set.
	Pools4, Pools6 []string
	// PoolsFrom says where the pools came from, for the log.
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
		return nil, fmt.Errorf("%w: %s annotation %s=%s is not a JSON list of strings (e.g. [\"10.244.1.5\"]): %w", ErrAnnotation, owner, key, value, err)
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

// ParseIPAddrs reads the fixed-address annotation of a pod: at most one
// IPv4 and one IPv6 address (a /32 or /128 prefix is accepted too).
func ParseIPAddrs(annots map[string]string, owner string) ([]netip.Addr, error) {
	if _, key, _ := lookup(annots, annotIPAddrsNoIPAM, owner); key != "" {
		return nil, fmt.Errorf("%w: %s annotation %s is not supported by routed (every address comes from routed-ipam); use %s%s instead", ErrAnnotation, owner, key, RoutedPrefix, AnnotIPAddrs)
	}
	value, key, err := lookup(annots, AnnotIPAddrs, owner)
	if err != nil || key == "" {
		return nil, err
	}
	list, err := stringList(value, key, owner)
	if err != nil {
		return nil, err
	}
	var out []netip.Addr
	for _, s := range list {
		a, err := netip.ParseAddr(s)
		if err != nil {
			p, perr := netip.ParsePrefix(s)
			if perr != nil || !p.IsSingleIP() {
				return nil, fmt.Errorf("%w: %s annotation %s: %q is not an IP address", ErrAnnotation, owner, key, s)
			}
			a = p.Addr()
		}
		if a.Is4In6() || a.Zone() != "" {
			return nil, fmt.Errorf("%w: %s annotation %s: %q is not a plain IPv4 or IPv6 address", ErrAnnotation, owner, key, s)
		}
		for _, prev := range out {
			if prev.Is4() == a.Is4() {
				return nil, fmt.Errorf("%w: %s annotation %s=%s names two IPv%d addresses; routed assigns a pod one address per family", ErrAnnotation, owner, key, value, familyOf(a))
			}
		}
		out = append(out, a)
	}
	return out, nil
}

func familyOf(a netip.Addr) int {
	if a.Is4() {
		return 4
	}
	return 6
}

// ParsePools reads the pool annotations of a pod or namespace: pool
// names or CIDRs of the annotation's family (ipv4pools, ipv6pools).
// Whether a name or CIDR matches a pool is IPAM's to say.
func ParsePools(annots map[string]string, owner string) (v4, v6 []string, err error) {
	if v4, err = parsePools(annots, owner, AnnotIPv4Pools, 4); err != nil {
		return nil, nil, err
	}
	if v6, err = parsePools(annots, owner, AnnotIPv6Pools, 6); err != nil {
		return nil, nil, err
	}
	return v4, v6, nil
}

func parsePools(annots map[string]string, owner, name string, family int) ([]string, error) {
	value, key, err := lookup(annots, name, owner)
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
		if p, err := netip.ParsePrefix(s); err != nil || familyOf(p.Addr()) != family {
			return nil, fmt.Errorf("%w: %s annotation %s: %q is neither a pool name nor an IPv%d CIDR", ErrAnnotation, owner, key, s, family)
		}
	}
	return list, nil
}
