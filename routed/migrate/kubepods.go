package migrate

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/pager"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/kernel"
	"github.com/routed-net/routed/routed/controllers"
)

// Annotations Calico writes on Kubernetes objects (libcalico-go's KDD
// backend and CNI plugin).
const (
	annPodIP       = "cni.projectcalico.org/podIP"
	annPodIPs      = "cni.projectcalico.org/podIPs"
	annContainerID = "cni.projectcalico.org/containerID"

	annNodeIPv4      = "projectcalico.org/IPv4Address"
	annNodeIPv6      = "projectcalico.org/IPv6Address"
	annNodeASN       = "projectcalico.org/ASNumber"
	annNodeRRCluster = "projectcalico.org/RouteReflectorClusterID"
	annNodeIPIP      = "projectcalico.org/IPv4IPIPTunnelAddr"
	annNodeVXLAN     = "projectcalico.org/IPv4VXLANTunnelAddr"
	annNodeVXLANMAC  = "projectcalico.org/VXLANTunnelMACAddr"
	annNodeVXLAN6    = "projectcalico.org/IPv6VXLANTunnelAddr"
	annNodeVXLANMAC6 = "projectcalico.org/VXLANTunnelMACAddrV6"
	annNodeLabels    = "projectcalico.org/labels"
	annNodeWGKey     = "projectcalico.org/WireguardPublicKey"
	annNodeWGKey6    = "projectcalico.org/WireguardPublicKeyV6"
)

// podEndpointIface is the interface Calico's CNI plugin gives every pod
// (its WorkloadEndpoint's endpoint).
const podEndpointIface = "eth0"

// readKube derives what Calico derives from Kubernetes objects: a Node
// per node calico-node annotated, the namespace and service-account
// profiles, and a WorkloadEndpoint per running pod Calico addressed.
func (s *kubeSource) readKube(ctx context.Context, st *calicoState) error {
	nodes, err := listAll[corev1.Node](ctx, func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
		return s.kube.CoreV1().Nodes().List(ctx, o)
	})
	if err != nil {
		return fmt.Errorf("migrate: listing nodes: %w", err)
	}
	s.nodes = make(map[string]*corev1.Node, len(nodes))
	for i := range nodes {
		s.nodes[nodes[i].Name] = &nodes[i]
		n, warnings, skip, err := kubeNode(&nodes[i])
		switch {
		case err != nil:
			st.skipped = append(st.skipped, fmt.Sprintf("Node: %v", err))
		case skip != "":
			st.skipped = append(st.skipped, skip)
		default:
			st.warnings = append(st.warnings, warnings...)
			st.resources = append(st.resources, n)
		}
	}

	nss, err := listAll[corev1.Namespace](ctx, func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
		return s.kube.CoreV1().Namespaces().List(ctx, o)
	})
	if err != nil {
		return fmt.Errorf("migrate: listing namespaces: %w", err)
	}
	for i := range nss {
		st.resources = append(st.resources, controllers.NamespaceProfile(&nss[i]))
	}
	sas, err := listAll[corev1.ServiceAccount](ctx, func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
		return s.kube.CoreV1().ServiceAccounts("").List(ctx, o)
	})
	if err != nil {
		return fmt.Errorf("migrate: listing service accounts: %w", err)
	}
	for i := range sas {
		st.resources = append(st.resources, controllers.ServiceAccountProfile(&sas[i]))
	}

	pods, err := listAll[corev1.Pod](ctx, func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
		return s.kube.CoreV1().Pods("").List(ctx, o)
	})
	if err != nil {
		return fmt.Errorf("migrate: listing pods: %w", err)
	}
	for i := range pods {
		p := &pods[i]
		w, err := podEndpoint(p, s.blocks)
		switch {
		case err != nil:
			st.skipped = append(st.skipped, fmt.Sprintf("pod %s/%s on %s: %v", p.Namespace, p.Name, p.Spec.NodeName, err))
		case w != nil:
			st.resources = append(st.resources, w)
		}
	}

	nps, err := s.kube.NetworkingV1().NetworkPolicies("").List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return fmt.Errorf("migrate: listing NetworkPolicies: %w", err)
	}
	if n := len(nps.Items) + int(ptrOr(nps.RemainingItemCount)); n > 0 {
		st.notes = append(st.notes, fmt.Sprintf("%d Kubernetes NetworkPolicies stay in Kubernetes: routed-controllers convert them (knp.default.<name>); start routed-controllers before the first node switches", n))
	}
	return nil
}

func ptrOr(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

// listAll pages through a Kubernetes list of Ts.
func listAll[T any](ctx context.Context, list pager.ListPageFunc) ([]T, error) {
	var out []T
	err := pager.New(list).EachListItem(ctx, metav1.ListOptions{}, func(o runtime.Object) error {
		item, ok := any(o).(*T)
		if !ok {
			return fmt.Errorf("migrate: listed a %T", o)
		}
		out = append(out, *item)
		return nil
	})
	return out, err
}

// kubeNode is the Calico Node libcalico-go derives from a Kubernetes
// node and calico-node's annotations on it, read as a Calico Node file.
// A node without a Calico address annotation never ran calico-node: skip
// says so.
func kubeNode(n *corev1.Node) (r api.Resource, warnings []string, skip string, err error) {
	a := n.Annotations
	if a[annNodeIPv4] == "" && a[annNodeIPv6] == "" {
		return nil, nil, fmt.Sprintf("Node %s: calico-node left no address on it (%s, %s); routed-node writes its record when it starts there", n.Name, annNodeIPv4, annNodeIPv6), nil
	}
	labels := map[string]any{}
	if raw := a[annNodeLabels]; raw != "" {
		var l map[string]string
		if err := json.Unmarshal([]byte(raw), &l); err != nil {
			return nil, nil, "", fmt.Errorf("the Kubernetes Node %s: annotation %s is not a JSON map of labels: %w", n.Name, annNodeLabels, err)
		}
		for k, v := range l {
			labels[k] = v
		}
	}
	// Kubernetes' labels win over Calico's of the same name (Calico's
	// merge).
	for k, v := range n.Labels {
		labels[k] = v
	}
	bgp := map[string]any{}
	for ann, field := range map[string]string{annNodeIPv4: "ipv4Address", annNodeIPv6: "ipv6Address", annNodeRRCluster: "routeReflectorClusterID", annNodeIPIP: "ipv4IPIPTunnelAddr"} {
		if v := a[ann]; v != "" {
			bgp[field] = v
		}
	}
	if v := a[annNodeASN]; v != "" {
		// Calico writes a plain or a dotted ("1.10") AS number.
		if asn, err := strconv.ParseUint(v, 10, 32); err == nil {
			bgp["asNumber"] = asn
		} else {
			bgp["asNumber"] = v
		}
	}
	spec := map[string]any{"bgp": bgp}
	for ann, field := range map[string]string{annNodeVXLAN: "ipv4VXLANTunnelAddr", annNodeVXLANMAC: "vxlanTunnelMACAddr", annNodeVXLAN6: "ipv6VXLANTunnelAddr", annNodeVXLANMAC6: "vxlanTunnelMACAddrV6"} {
		if v := a[ann]; v != "" {
			spec[field] = v
		}
	}
	where := "Kubernetes Node " + n.Name
	if a[annNodeWGKey] != "" || a[annNodeWGKey6] != "" {
		warnings = append(warnings, fmt.Sprintf("%s: Calico's WireGuard key (%s) is not carried: routed-node makes its own key pair when WireGuard is on (--wireguard, or the carried FelixConfiguration's wireguardEnabled); until then traffic between nodes is not encrypted", where, annNodeWGKey))
	}
	md := map[string]any{"name": n.Name}
	if len(labels) > 0 {
		md["labels"] = labels
	}
	r, w, err := decodeCalicoObject(api.KindNode, map[string]any{"metadata": md, "spec": spec}, where)
	if err != nil {
		return nil, nil, "", err
	}
	return r, append(warnings, w...), "", nil
}

// podEndpoint is the WorkloadEndpoint Calico derives from a pod its CNI
// plugin addressed (libcalico-go's pod conversion), with the handle that
// holds the pod's addresses in Calico's blocks. Pods Calico makes no
// endpoint for (host network, not scheduled, finished, without an
// address yet) are nil without error; a pod whose addresses Calico's
// IPAM does not hold for it is an error naming why.
func podEndpoint(p *corev1.Pod, bs blockSet) (*api.WorkloadEndpoint, error) {
	if p.Spec.HostNetwork || p.Spec.NodeName == "" || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return nil, nil
	}
	if ip, ok := p.Annotations[annPodIP]; ok && ip == "" && p.DeletionTimestamp != nil {
		return nil, nil // Calico's CNI DEL took the address away.
	}
	addrs, err := podAddrs(p)
	if err != nil {
		return nil, err
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("no address yet (no %s annotation, no status.podIPs): migrate again once it has one", annPodIPs)
	}
	handle := ""
	nets := make([]string, len(addrs))
	for i, a := range addrs {
		nets[i] = netip.PrefixFrom(a, a.BitLen()).String()
		h, ok := bs.handles[a]
		if !ok {
			return nil, fmt.Errorf("its address %s is not allocated in a carried Calico block (not Calico's IPAM, or its block was not carried)", a)
		}
		if owner := bs.pods[a]; owner != "" && owner != p.Namespace+"/"+p.Name {
			return nil, fmt.Errorf("its address %s is held by Calico's IPAM for pod %s", a, owner)
		}
		if handle != "" && h != handle {
			return nil, fmt.Errorf("its addresses are held by two handles, %s and %s", handle, h)
		}
		handle = h
	}
	cid := p.Annotations[annContainerID]
	if cid == "" {
		// Older Calico CNI plugins did not annotate the container; the
		// pod's handle is "<network>.<containerID>".
		if _, after, ok := strings.Cut(handle, "."); ok {
			cid = after
		}
	}
	if cid == "" {
		return nil, fmt.Errorf("no %s annotation and its handle %q names no container", annContainerID, handle)
	}
	w := &api.WorkloadEndpoint{
		TypeMeta: api.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindWorkloadEndpoint},
		Metadata: api.ObjectMeta{Name: api.WorkloadEndpointName(p.Spec.NodeName, "k8s", p.Namespace, p.Name, cid, podEndpointIface)},
		Spec: api.WorkloadEndpointSpec{
			Node: p.Spec.NodeName, Orchestrator: "k8s", Namespace: p.Namespace, Pod: p.Name, ContainerID: cid,
			Endpoint: podEndpointIface, ContainerInterface: podEndpointIface,
			// Calico's device name, so the pod keeps its device.
			InterfaceName: kernel.HostDeviceName(p.Namespace, p.Name, cid),
			IPNetworks:    nets, Handle: handle,
		},
	}
	// Labels, profiles, service account and named ports exactly as the
	// CNI plugin and routed's controllers write them.
	w, _ = controllers.PodEndpoint(w, p)
	if err := w.Validate(); err != nil {
		return nil, err
	}
	return w, nil
}

// podAddrs are the pod's addresses as Calico's CNI plugin annotated them
// (podIPs, else podIP), else as the kubelet reported them.
func podAddrs(p *corev1.Pod) ([]netip.Addr, error) {
	var raw []string
	from := "status.podIPs"
	switch {
	case p.Annotations[annPodIPs] != "":
		raw, from = strings.Split(p.Annotations[annPodIPs], ","), "annotation "+annPodIPs
	case p.Annotations[annPodIP] != "":
		raw, from = []string{p.Annotations[annPodIP]}, "annotation "+annPodIP
	default:
		for _, ip := range p.Status.PodIPs {
			raw = append(raw, ip.IP)
		}
		if len(raw) == 0 && p.Status.PodIP != "" {
			raw = []string{p.Status.PodIP}
		}
	}
	var out []netip.Addr
	for _, s := range raw {
		s = strings.TrimSpace(s)
		a, err := netip.ParseAddr(s)
		if err != nil {
			pre, perr := netip.ParsePrefix(s)
			if perr != nil {
				return nil, fmt.Errorf("%s: %q is neither an address nor a CIDR", from, s)
			}
			a = pre.Addr()
		}
		out = append(out, a.Unmap())
	}
	return out, nil
}
