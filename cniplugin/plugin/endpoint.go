package plugin

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"time"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
)

// buildEndpoint describes this attachment for felix and BGP. A pod's
// endpoint carries Calico's identity: the labels projectcalico.org/
// namespace, orchestrator and serviceaccount besides the pod's own, and
// the profiles of its namespace and service account, which policy
// selectors match.
func (c *call) buildEndpoint(ips []net.IP, contMAC net.HardwareAddr, pod *PodInfo) *api.WorkloadEndpoint {
	nets := make([]string, 0, len(ips))
	for _, ip := range ips {
		nets = append(nets, hostPrefix(ip).String())
	}
	if pod == nil {
		pod = &PodInfo{}
	}
	wep := &api.WorkloadEndpoint{
		TypeMeta: api.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindWorkloadEndpoint},
		Metadata: api.ObjectMeta{Name: c.wepName()},
		Spec: api.WorkloadEndpointSpec{
			Node:               c.node,
			Orchestrator:       c.orchestrator,
			Namespace:          c.k8s.Namespace,
			Pod:                c.k8s.Pod,
			ContainerID:        c.args.ContainerID,
			Endpoint:           c.args.IfName,
			InterfaceName:      c.hostVeth,
			ContainerInterface: c.args.IfName,
			IPNetworks:         nets,
			MAC:                contMAC.String(),
			Handle:             c.handle(),
			ServiceAccountName: pod.ServiceAccount,
			Ports:              pod.Ports,
		},
	}
	labels := maps.Clone(pod.Labels)
	if c.orchestrator == "k8s" && c.k8s.Namespace != "" {
		labels, wep.Spec.Profiles = api.PodIdentity(c.k8s.Namespace, pod.ServiceAccount, pod.Labels)
	}
	wep.Metadata.Labels = labels
	return wep
}

// endpointWriteBudget bounds writeEndpoint's retries: several etcd
// elections, well inside a kubelet's CNI timeout.
const endpointWriteBudget = 30 * time.Second

// writeEndpoint creates the endpoint, replacing a leftover of an earlier
// sandbox of the same pod (same name, other container ID), and returns
// the stored revision so rollback deletes exactly what it wrote. An
// unreachable etcd (an election, a member lost mid-request) is retried
// for up to endpointWriteBudget: a create that did land comes back as
// ErrExists and is applied again, the same content.
func writeEndpoint(ctx context.Context, store Store, wep *api.WorkloadEndpoint) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, endpointWriteBudget)
	defer cancel()
	var r api.Resource
	err := datastore.RetryUnavailable(ctx, func() error {
		var err error
		r, err = store.Create(ctx, wep)
		if errors.Is(err, datastore.ErrExists) {
			r, err = store.Apply(ctx, wep)
		}
		return err
	})
	if err != nil {
		return "", fmt.Errorf("write WorkloadEndpoint %s: %w", wep.Metadata.Name, err)
	}
	return r.Meta().ResourceVersion, nil
}

// getEndpoint reads this attachment's endpoint; nil without error when
// there is none. An unreachable etcd is retried as RetryUnavailable does
// (an election must not fail a DEL: the runtime would retry it, but the
// pod's address and endpoint stay until it does).
func getEndpoint(ctx context.Context, store Store, name string) (*api.WorkloadEndpoint, error) {
	var r api.Resource
	err := datastore.RetryUnavailable(ctx, func() error {
		var err error
		r, err = store.Get(ctx, api.KindWorkloadEndpoint, name)
		return err
	})
	if datastore.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read WorkloadEndpoint %s: %w", name, err)
	}
	wep, ok := r.(*api.WorkloadEndpoint)
	if !ok {
		return nil, fmt.Errorf("read WorkloadEndpoint %s: unexpected type %T", name, r)
	}
	return wep, nil
}

// deleteEndpoint removes an endpoint at a known revision; gone already,
// or replaced since by a newer sandbox, both count as done. A delete at
// a revision is safe to repeat, so an unreachable etcd is retried (a
// delete that landed before the error comes back as not found).
func deleteEndpoint(ctx context.Context, store Store, name, rev string) error {
	err := datastore.RetryUnavailable(ctx, func() error {
		return store.Delete(ctx, api.KindWorkloadEndpoint, name, rev)
	})
	if err == nil || datastore.IsNotFound(err) || errors.Is(err, datastore.ErrConflict) {
		return nil
	}
	return fmt.Errorf("delete WorkloadEndpoint %s: %w", name, err)
}

// podInfo asks the pod source, when Kubernetes is configured.
func (p *Plugin) podInfo(ctx context.Context, c *call) (*PodInfo, error) {
	kc := c.conf.Kubernetes.Kubeconfig
	if kc == "" || c.k8s.Pod == "" {
		return nil, nil
	}
	if p.Pods == nil {
		c.log.Debug("kubernetes.kubeconfig is set but this build has no Kubernetes pod source; endpoint written without pod labels")
		return nil, nil
	}
	info, err := p.Pods.PodInfo(ctx, kc, c.k8s.Namespace, c.k8s.Pod)
	if err != nil {
		return nil, fmt.Errorf("read pod %s: %w", c.describe(), err)
	}
	return info, nil
}
