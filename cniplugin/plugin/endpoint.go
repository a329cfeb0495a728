package plugin

import (
	"context"
	"fmt"
	"maps"
	"net"

	"github.com/routed-net/routed/pkg/api"
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

// newEndpoint describes this attachment before its veth exists: the
// pod as the pod source tells it, no addresses yet, and a container MAC
// chosen here (the veth is created with it), for an ADD that writes the
// endpoint in its IPAM transaction.
func (p *Plugin) newEndpoint(ctx context.Context, c *call) (*api.WorkloadEndpoint, net.HardwareAddr, error) {
	pod, err := p.podInfo(ctx, c)
	if err != nil {
		return nil, nil, err
	}
	mac, err := randomMAC()
	if err != nil {
		return nil, nil, err
	}
	return c.buildEndpoint(nil, mac, pod), mac, nil
}

// podInfo asks the pod source, when Kubernetes is configured, once per
// call (an ADD that routed did not take goes on with what it read).
func (p *Plugin) podInfo(ctx context.Context, c *call) (*PodInfo, error) {
	if c.podRead {
		return c.pod, nil
	}
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
	c.pod, c.podRead = info, true
	return info, nil
}
