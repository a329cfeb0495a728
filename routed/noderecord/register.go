// Package noderecord owns this node's Node record: Register writes it at
// start (keeping what operators set), Keeper re-creates it when it is
// deleted while routed runs, and EnsureDefaultPool creates the default
// pools of a new cluster.
package noderecord

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/sirupsen/logrus"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
)

// writeRetries bounds read-modify-write loops that lose to other writers.
const writeRetries = 10

// Addresses are a node's own addresses with their prefix lengths: V4
// always, V6 when the node has IPv6 (invalid otherwise).
type Addresses struct {
	V4, V6 netip.Prefix
}

// set records a in the Node's spec: routed owns both fields (an IPv6
// address the node no longer has is removed).
func (a Addresses) set(b *api.NodeBGPSpec) {
	b.IPv4Address = a.V4.String()
	b.IPv6Address = ""
	if a.V6.IsValid() {
		b.IPv6Address = a.V6.String()
	}
}

// Register creates or updates this node's Node with its addresses,
// keeping everything an operator set (labels, ASN, RR cluster ID).
func Register(ctx context.Context, ds *datastore.Client, name string, addr Addresses) (*api.Node, error) {
	for i := 0; i < writeRetries; i++ {
		r, err := ds.Get(ctx, api.KindNode, name)
		var n *api.Node
		switch {
		case datastore.IsNotFound(err):
			n = &api.Node{TypeMeta: api.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindNode}}
			n.Metadata.Name = name
		case err != nil:
			return nil, err
		default:
			n = r.(*api.Node)
		}
		if n.Spec.BGP == nil {
			n.Spec.BGP = &api.NodeBGPSpec{}
		}
		if n.Metadata.Labels == nil {
			n.Metadata.Labels = map[string]string{}
		}
		if _, ok := n.Metadata.Labels["kubernetes.io/hostname"]; !ok {
			n.Metadata.Labels["kubernetes.io/hostname"] = name
		}
		before := *n.Spec.BGP
		addr.set(n.Spec.BGP)
		if *n.Spec.BGP == before && n.Metadata.ResourceVersion != "" {
			return n, nil
		}
		if n.Metadata.ResourceVersion == "" {
			_, err = ds.Create(ctx, n)
		} else {
			_, err = ds.Update(ctx, n)
		}
		if errors.Is(err, datastore.ErrConflict) || errors.Is(err, datastore.ErrExists) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("register node %q: %w", name, err)
		}
		log.WithField("address", addr.V4).WithField("address6", n.Spec.BGP.IPv6Address).Info("node registered")
		return n, nil
	}
	return nil, fmt.Errorf("register node %q: %w after %d attempts", name, datastore.ErrConflict, writeRetries)
}

// DefaultPool is the pool created at start when no pool exists.
type DefaultPool struct {
	CIDR        string
	BlockSize   int
	IPIPMode    string
	VXLANMode   string
	NATOutgoing bool
	Disabled    bool // ROUTED_NO_DEFAULT_IPPOOLS
	// CIDR6, when set, is the IPv6 pool created when no IPv6 pool
	// exists (Calico's CALICO_IPV6POOL_CIDR), with BlockSize6,
	// VXLANMode6 and NATOutgoing6.
	CIDR6        string
	BlockSize6   int
	VXLANMode6   string
	NATOutgoing6 bool
}

// EnsureDefaultPool creates the default pool when no pool exists, and
// the default IPv6 pool (when configured) when no IPv6 pool exists.
// Several nodes may race here; losing the race is fine.
func EnsureDefaultPool(ctx context.Context, ds *datastore.Client, p DefaultPool) error {
	if p.Disabled {
		return nil
	}
	pools, _, err := ds.List(ctx, api.KindIPPool)
	if err != nil {
		return err
	}
	if len(pools) == 0 {
		spec := api.IPPoolSpec{CIDR: p.CIDR, BlockSize: p.BlockSize, IPIPMode: p.IPIPMode, VXLANMode: p.VXLANMode, NATOutgoing: p.NATOutgoing}
		if err := createDefaultPool(ctx, ds, "default-ipv4-ippool", spec, "ROUTED_IPV4POOL_*"); err != nil {
			return err
		}
	}
	if p.CIDR6 == "" || slices.ContainsFunc(pools, func(r api.Resource) bool { ip, ok := r.(*api.IPPool); return ok && ip.IsIPv6() }) {
		return nil
	}
	spec := api.IPPoolSpec{CIDR: p.CIDR6, BlockSize: p.BlockSize6, VXLANMode: p.VXLANMode6, NATOutgoing: p.NATOutgoing6}
	return createDefaultPool(ctx, ds, "default-ipv6-ippool", spec, "ROUTED_IPV6POOL_*")
}

func createDefaultPool(ctx context.Context, ds *datastore.Client, name string, spec api.IPPoolSpec, from string) error {
	pool := &api.IPPool{TypeMeta: api.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindIPPool}, Spec: spec}
	pool.Metadata.Name = name
	_, err := ds.Create(ctx, pool)
	switch {
	case err == nil:
		log.WithField("cidr", pool.Spec.CIDR).Infof("created the default IP pool %s", name)
	case errors.Is(err, datastore.ErrExists), errors.Is(err, datastore.ErrConflict):
		err = nil // another node created a pool meanwhile
	case errors.Is(err, api.ErrInvalid):
		err = fmt.Errorf("default pool from %s: %w", from, err)
	}
	return err
}

var log = logrus.WithField("component", "noderecord")
