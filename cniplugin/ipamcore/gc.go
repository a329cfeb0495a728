//go:build !cnithin

package ipamcore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/sirupsen/logrus"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/pkg/ipam"
	"github.com/routed-net/routed/pkg/kernel"
)

// GC releases the network's allocations on node whose container is not
// among the valid attachments: first those a WorkloadEndpoint still
// names, then allocations no endpoint names (older than the grace
// period, since ADD allocates before it writes the endpoint).
func (m *IPAM) GC(ctx context.Context, network, node string, validAttachments []types.GCAttachment) error {
	valid := map[string]bool{}
	for _, a := range validAttachments {
		valid[ipam.PodHandle(network, a.ContainerID)] = true
	}
	prefix := network + "."
	stale := map[string]bool{}
	weps, _, err := m.ds.List(ctx, api.KindWorkloadEndpoint)
	if err != nil {
		return fmt.Errorf("list WorkloadEndpoints: %w", err)
	}
	for _, r := range weps {
		w, ok := r.(*api.WorkloadEndpoint)
		if ok && w.Spec.Node == node && strings.HasPrefix(w.Spec.Handle, prefix) && !valid[w.Spec.Handle] {
			stale[w.Spec.Handle] = true
		}
	}
	report, err := m.ipam.Check(ctx, m.conf.GCGrace())
	if err != nil {
		return fmt.Errorf("find allocations without endpoints: %w", err)
	}
	for _, l := range report.Leaks {
		if l.Node == node && strings.HasPrefix(l.Handle, prefix) && !valid[l.Handle] {
			stale[l.Handle] = true
		}
	}
	if len(stale) == 0 {
		return nil
	}
	return m.locked(ctx, func(ctx context.Context) error {
		var errs []error
		for h := range stale {
			ips, err := m.ipam.ReleaseByHandle(ctx, h)
			if err != nil {
				errs = append(errs, fmt.Errorf("release handle %s: %w", h, err))
				continue
			}
			m.log.WithFields(logrus.Fields{"handle": h, "ips": ips}).Info("GC released stale allocation")
		}
		return errors.Join(errs...)
	})
}

// Status succeeds when the datastore answers and some enabled pool
// (among ipv4_pools/ipv6_pools, if given) selects node. Whatever the cause, a
// failure means CNI code 50 (plugin not available); etcdEndpoints is the
// configured value, for the message.
func (m *IPAM) Status(ctx context.Context, node, etcdEndpoints string) error {
	pools, _, err := m.ds.List(ctx, api.KindIPPool)
	if err != nil {
		return fmt.Errorf("datastore at %s is not usable: %w", etcdEndpoints, err)
	}
	var labels map[string]string
	if n, err := m.ds.Get(ctx, api.KindNode, node); err == nil {
		labels = n.Meta().Labels
	} else if !datastore.IsNotFound(err) {
		return fmt.Errorf("read node %s: %w", node, err)
	}
	var why []string
	for _, r := range pools {
		p, ok := r.(*api.IPPool)
		fam := 4
		if ok && p.IsIPv6() {
			fam = 6
		}
		if !ok || m.conf.mode(fam) == familyOff || !wanted(p, m.conf.pools(fam)) {
			continue
		}
		selects, err := kernel.PoolSelectsNode(p.Spec.NodeSelector, labels)
		switch {
		case p.Spec.Disabled:
			why = append(why, fmt.Sprintf("pool %s is disabled", p.Metadata.Name))
		case err != nil:
			why = append(why, fmt.Sprintf("pool %s: bad nodeSelector: %v", p.Metadata.Name, err))
		case !selects:
			why = append(why, fmt.Sprintf("pool %s: nodeSelector %q does not select node %s", p.Metadata.Name, p.Spec.NodeSelector, node))
		default:
			return nil
		}
	}
	if len(why) == 0 {
		why = []string{"no IP pool exists" + poolsNote("ipv4_pools", m.conf.IPv4Pools) + poolsNote("ipv6_pools", m.conf.IPv6Pools)}
	}
	return fmt.Errorf("no IP pool can serve node %s: %s", node, strings.Join(why, "; "))
}

func wanted(p *api.IPPool, refs []string) bool {
	if len(refs) == 0 {
		return true
	}
	for _, r := range refs {
		if r == p.Metadata.Name || r == p.Spec.CIDR {
			return true
		}
	}
	return false
}

func poolsNote(field string, refs []string) string {
	if len(refs) == 0 {
		return ""
	}
	return " among " + field + " " + strings.Join(refs, ",")
}
