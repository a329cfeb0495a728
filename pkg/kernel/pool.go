package kernel

import "github.com/routed-net/routed/pkg/selector"

// PoolNodeSelector is an IP pool's parsed spec.nodeSelector: the rule
// for which nodes a pool serves. Every component that asks "does this
// pool select this node" (IPAM allocation, the CNI plugin's start-up
// check, felix's tunnel devices, tunnel addressing) asks it here, so
// they agree on every label set. The zero value selects no node: what
// an unparseable selector means to a reader that cannot refuse it.
type PoolNodeSelector struct {
	sel selector.Selector
}

// ParsePoolNodeSelector parses a pool's spec.nodeSelector; empty selects
// every node, as all() does (the API's default).
func ParsePoolNodeSelector(expr string) (PoolNodeSelector, error) {
	sel, err := selector.Parse(expr)
	if err != nil {
		return PoolNodeSelector{}, err
	}
	return PoolNodeSelector{sel: sel}, nil
}

// SelectsNode reports whether the pool serves a node with these labels
// (nil: a node with no labels, or whose Node is not known yet).
func (s PoolNodeSelector) SelectsNode(labels map[string]string) bool {
	return s.sel != nil && s.sel.Evaluate(labels)
}

// PoolSelectsNode parses expr and evaluates it against labels in one go,
// for callers that ask once.
func PoolSelectsNode(expr string, labels map[string]string) (bool, error) {
	s, err := ParsePoolNodeSelector(expr)
	if err != nil {
		return false, err
	}
	return s.SelectsNode(labels), nil
}
