package ipam

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
)

// Key layout (see README.md). CIDRs appear in keys with "/" replaced by
// "-" so that a block is one path element: 10.244.0.0/26 -> 10.244.0.0-26.
//
// A block is stored whole under blockPrefix, outside the prefix every
// node watches (datastore.KeyPrefix), and as a small summary under
// summaryPrefix, inside it, written in the same transaction: its
// affinity, how many addresses are in use and which are held by other
// nodes, all the node feed reads of it. So a pod's allocation sends
// each watching node a summary of about 100 bytes, not the block's
// allocations and attributes (kilobytes): at 5,000 nodes etcd spent its
// CPU sending block values (issue 36). Before layout 2 the whole block
// was stored under summaryPrefix (ensureLayout moves such blocks).
const (
	ipamPrefix     = datastore.KeyPrefix + "ipam/"
	summaryPrefix  = ipamPrefix + "blocks/"
	blockPrefix    = datastore.IPAMDataPrefix + "blocks/"
	affinityPrefix = ipamPrefix + "affinities/"
	handlePrefix   = ipamPrefix + "handles/"
	// layoutKey holds the layout the blocks are stored in ("2"), once
	// every block stored before it is moved (ensureLayout).
	layoutKey = ipamPrefix + "layout"
)

// Handle naming conventions shared with the CNI plugin and the node agent.
const (
	// TunnelHandlePrefix starts the handle of a node's IPIP tunnel address.
	TunnelHandlePrefix = "ipip-tunnel-addr-"
	// DefaultNetwork is the network name used in pod handles by default.
	DefaultNetwork = "k8s-pod-network"
)

// PodHandle returns the handle for a pod's addresses: "<network>.<containerID>".
func PodHandle(network, containerID string) string { return network + "." + containerID }

// TunnelHandle returns the handle for node's IPIP tunnel address.
func TunnelHandle(node string) string { return TunnelHandlePrefix + node }

func cidrKeyPart(p netip.Prefix) string { return strings.Replace(p.String(), "/", "-", 1) }

func parseCIDRKeyPart(s string) (netip.Prefix, error) {
	i := strings.LastIndexByte(s, '-')
	if i < 0 {
		return netip.Prefix{}, fmt.Errorf("%w: key part %q is not a CIDR", ErrCorrupt, s)
	}
	p, err := netip.ParsePrefix(s[:i] + "/" + s[i+1:])
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%w: key part %q: %w", ErrCorrupt, s, err)
	}
	return p, nil
}

func blockKey(p netip.Prefix) string { return blockPrefix + cidrKeyPart(p) }

// summaryKeyOf is the key of the summary of the block stored at key.
func summaryKeyOf(key string) string { return summaryPrefix + strings.TrimPrefix(key, blockPrefix) }

func affinityKey(node string, p netip.Prefix) string {
	return affinityPrefix + node + "/" + cidrKeyPart(p)
}

func nodeAffinityPrefix(node string) string { return affinityPrefix + node + "/" }

func handleKey(id string) string { return handlePrefix + id }

// parseAffinityKey splits .../affinities/<node>/<cidr> into its parts.
func parseAffinityKey(key string) (string, netip.Prefix, error) {
	rest, ok := strings.CutPrefix(key, affinityPrefix)
	node, cidr, ok2 := strings.Cut(rest, "/")
	if !ok || !ok2 || node == "" {
		return "", netip.Prefix{}, fmt.Errorf("%w: bad affinity key %q", ErrCorrupt, key)
	}
	p, err := parseCIDRKeyPart(cidr)
	return node, p, err
}

func parseBlockKey(key string) (netip.Prefix, error) {
	rest, ok := strings.CutPrefix(key, blockPrefix)
	if !ok {
		rest, ok = strings.CutPrefix(key, summaryPrefix)
	}
	if !ok {
		return netip.Prefix{}, fmt.Errorf("%w: bad block key %q", ErrCorrupt, key)
	}
	return parseCIDRKeyPart(rest)
}

func poolKey(name string) string      { return datastore.Key(api.KindIPPool, name) }
func nodeKey(name string) string      { return datastore.Key(api.KindNode, name) }
func ipamConfigKey() string           { return datastore.Key(api.KindIPAMConfiguration, "default") }
func hostAffinity(node string) string { return "host:" + node }

// checkName rejects names that would break the key layout.
func checkName(what, s string) error {
	if s == "" {
		return fmt.Errorf("%w: %s is required", ErrInvalidArgument, what)
	}
	if strings.ContainsAny(s, "/\x00") || len(s) > 512 {
		return fmt.Errorf("%w: %s %q must not contain '/' and must be at most 512 bytes", ErrInvalidArgument, what, s)
	}
	return nil
}
