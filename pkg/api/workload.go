package api

import (
	"net/netip"
	"strings"

	"github.com/routed-net/routed/pkg/kernel"
)

// WorkloadEndpoint records one pod interface; the CNI plugin writes it on
// ADD and removes it on DEL, and felix routes to it.
type WorkloadEndpoint struct {
	TypeMeta `json:",inline"`
	Metadata ObjectMeta           `json:"metadata"`
	Spec     WorkloadEndpointSpec `json:"spec"`
}

// WorkloadEndpointSpec is the state of one pod interface.
type WorkloadEndpointSpec struct {
	Node          string `json:"node"`
	Orchestrator  string `json:"orchestrator,omitempty"`
	Namespace     string `json:"namespace,omitempty"`
	Pod           string `json:"pod,omitempty"`
	ContainerID   string `json:"containerID"`
	Endpoint      string `json:"endpoint,omitempty"`
	InterfaceName string `json:"interfaceName"`
	// ContainerInterface is the interface name inside the pod (eth0).
	ContainerInterface string   `json:"containerInterface,omitempty"`
	IPNetworks         []string `json:"ipNetworks"`
	MAC                string   `json:"mac,omitempty"`
	// Handle is the IPAM handle that holds the addresses.
	Handle string `json:"handle,omitempty"`
	// ServiceAccountName is the pod's service account (Kubernetes).
	ServiceAccountName string `json:"serviceAccountName,omitempty"`
	// Profiles name the Profiles whose labels the endpoint inherits and
	// whose rules apply when no policy selects it: for a pod, Calico's
	// "kns.<namespace>" and "ksa.<namespace>.<serviceaccount>".
	Profiles []string `json:"profiles,omitempty"`
	// Ports are the pod's named container ports, which rules' named
	// ports resolve to.
	Ports []WorkloadEndpointPort `json:"ports,omitempty"`
}

// WorkloadEndpointPort is one named port of a workload (Calico's).
type WorkloadEndpointPort struct {
	Name     string   `json:"name"`
	Protocol Protocol `json:"protocol"`
	Port     uint16   `json:"port"`
	HostPort uint16   `json:"hostPort,omitempty"`
	HostIP   string   `json:"hostIP,omitempty"`
}

// Identity labels Calico's CNI plugin puts on every pod endpoint, which
// policy selectors may match.
const (
	LabelNamespace      = "projectcalico.org/namespace"
	LabelOrchestrator   = "projectcalico.org/orchestrator"
	LabelServiceAccount = "projectcalico.org/serviceaccount"
)

// Profile name prefixes Calico gives Kubernetes namespaces and service
// accounts: "kns.<namespace>", "ksa.<namespace>.<serviceaccount>".
const (
	NamespaceProfilePrefix      = "kns."
	ServiceAccountProfilePrefix = "ksa."
)

// GetKind implements Resource.
func (w *WorkloadEndpoint) GetKind() Kind { return KindWorkloadEndpoint }

// Meta implements Resource.
func (w *WorkloadEndpoint) Meta() *ObjectMeta { return &w.Metadata }

func (w *WorkloadEndpoint) setDefaults() {
	if w.Spec.Orchestrator == "" {
		w.Spec.Orchestrator = "k8s"
	}
}

// WorkloadEndpointName builds the datastore name of a pod interface:
// unique per node, orchestrator, namespace, pod (or container) and
// interface, and free of characters that are not allowed in names.
func WorkloadEndpointName(node, orchestrator, namespace, pod, containerID, iface string) string {
	workload := pod
	if workload == "" {
		workload = containerID
	}
	parts := []string{node, orchestrator, namespace, workload, iface}
	for i, p := range parts {
		parts[i] = strings.ReplaceAll(p, "-", "--")
	}
	return strings.Join(parts, "-")
}

// WorkloadEndpointNamePrefix is how the names of node's endpoints start:
// the node with '-' doubled, then a single '-'. The next character is
// never '-' (that would be a longer node name), so the names of one
// node's endpoints form a key range: nodes watch only their own.
func WorkloadEndpointNamePrefix(node string) string {
	return strings.ReplaceAll(node, "-", "--") + "-"
}

// IsNodeWorkloadEndpointName reports whether name is the name of one of
// node's endpoints (every stored endpoint's name is, see Validate).
func IsNodeWorkloadEndpointName(name, node string) bool {
	p := WorkloadEndpointNamePrefix(node)
	return strings.HasPrefix(name, p) && !strings.HasPrefix(name, p+"-")
}

// WorkloadEndpointNode reads the node from an endpoint's name (the part
// before the first single '-', with '--' read as '-'), as
// WorkloadEndpointName wrote it. ok is false for a name that has no
// such part. It serves records that do not decode: a stored endpoint's
// name always starts with its node's (see Validate).
func WorkloadEndpointNode(name string) (node string, ok bool) {
	var b strings.Builder
	for i := 0; i < len(name); i++ {
		if name[i] != '-' {
			b.WriteByte(name[i])
			continue
		}
		if i+1 < len(name) && name[i+1] == '-' {
			b.WriteByte('-')
			i++
			continue
		}
		return b.String(), b.Len() > 0
	}
	return "", false
}

// Validate implements Resource.
func (w *WorkloadEndpoint) Validate() error {
	var v errs
	s := w.Spec
	validateName(&v, w.Metadata.Name)
	validateLabels(&v, "metadata.labels", w.Metadata.Labels)
	if s.Node == "" {
		v.add("spec.node", nil, "is required")
	} else if !IsNodeWorkloadEndpointName(w.Metadata.Name, s.Node) {
		v.add("metadata.name", w.Metadata.Name, "must start with %q for node %q: endpoint names are <node>-<orchestrator>-<namespace>-<pod>-<interface> with '-' doubled inside each part, as Calico's, and each node watches only its own", WorkloadEndpointNamePrefix(s.Node), s.Node)
	}
	if s.ContainerID == "" {
		v.add("spec.containerID", nil, "is required")
	}
	switch n := s.InterfaceName; {
	case n == "":
		v.add("spec.interfaceName", nil, "is required")
	default:
		// felix routes the endpoint's addresses to this device: naming
		// eth0 or lo would steer pod addresses to the host's interfaces.
		if err := kernel.CheckHostDeviceName(n); err != nil {
			v.add("spec.interfaceName", n, "must be a pod's host-side device: %v", err)
		}
	}
	for i, n := range s.IPNetworks {
		if _, err := netip.ParsePrefix(n); err != nil {
			v.add(indexed("spec.ipNetworks", i), n, "is not a CIDR")
		}
	}
	for i, p := range s.Profiles {
		if p == "" || len(p) > 253 || !nameRE().MatchString(p) {
			v.add(indexed("spec.profiles", i), p, "is not a profile name")
		}
	}
	for i, p := range s.Ports {
		f := indexed("spec.ports", i)
		if p.Name != "" && !portNameRE().MatchString(p.Name) {
			v.add(f+".name", p.Name, "is not a port name")
		}
		if !p.Protocol.HasPorts() {
			v.add(f+".protocol", p.Protocol.String(), "must be TCP, UDP or SCTP")
		}
		if p.Port == 0 {
			v.add(f+".port", nil, "is required (1-65535)")
		}
	}
	return v.result(KindWorkloadEndpoint, w.Metadata.Name)
}

// IPAMConfiguration holds cluster-wide IPAM settings; only "default" exists.
type IPAMConfiguration struct {
	TypeMeta `json:",inline"`
	Metadata ObjectMeta            `json:"metadata"`
	Spec     IPAMConfigurationSpec `json:"spec"`
}

// IPAMConfigurationSpec is the desired IPAM behaviour.
type IPAMConfigurationSpec struct {
	// StrictAffinity forbids borrowing addresses from other nodes' blocks.
	StrictAffinity bool `json:"strictAffinity,omitempty"`
	// MaxBlocksPerHost caps the blocks one node may claim; 0 means no cap.
	MaxBlocksPerHost int `json:"maxBlocksPerHost,omitempty"`
	// AutoAllocateBlocks defaults to true; a pointer tells unset from false.
	AutoAllocateBlocks *bool `json:"autoAllocateBlocks,omitempty"`
}

// GetKind implements Resource.
func (c *IPAMConfiguration) GetKind() Kind { return KindIPAMConfiguration }

// Meta implements Resource.
func (c *IPAMConfiguration) Meta() *ObjectMeta { return &c.Metadata }

func (c *IPAMConfiguration) setDefaults() {}

// AutoAllocate reports whether nodes may claim new blocks (default true).
func (c *IPAMConfiguration) AutoAllocate() bool {
	return c.Spec.AutoAllocateBlocks == nil || *c.Spec.AutoAllocateBlocks
}

// Validate implements Resource.
func (c *IPAMConfiguration) Validate() error {
	var v errs
	validateName(&v, c.Metadata.Name)
	if c.Metadata.Name != "default" {
		v.add("metadata.name", c.Metadata.Name, `must be "default"`)
	}
	if c.Spec.MaxBlocksPerHost < 0 {
		v.add("spec.maxBlocksPerHost", c.Spec.MaxBlocksPerHost, "must not be negative")
	}
	return v.result(KindIPAMConfiguration, c.Metadata.Name)
}

// PodIdentity is what Calico puts on a Kubernetes pod's endpoint besides
// the pod's own labels (a copy of podLabels is returned with them): the
// labels projectcalico.org/namespace, /orchestrator and, for names that
// fit a label value, /serviceaccount; and the profiles kns.<namespace>
// and, with a service account, ksa.<namespace>.<serviceaccount>. The CNI
// plugin writes it at ADD and routed's controllers keep it current.
func PodIdentity(namespace, serviceAccount string, podLabels map[string]string) (labels map[string]string, profiles []string) {
	labels = make(map[string]string, len(podLabels)+3)
	for k, v := range podLabels {
		labels[k] = v
	}
	labels[LabelNamespace] = namespace
	labels[LabelOrchestrator] = "k8s"
	profiles = []string{NamespaceProfilePrefix + namespace}
	if serviceAccount != "" {
		if len(serviceAccount) < 63 {
			labels[LabelServiceAccount] = serviceAccount
		}
		profiles = append(profiles, ServiceAccountProfilePrefix+namespace+"."+serviceAccount)
	}
	return labels, profiles
}

// ContainerPort is how Calico lists a pod's container port on its
// endpoint: only ports with a name or a host port, TCP when no protocol
// is given; ok is false for ports it leaves out (unnamed without a host
// port, out of range, or of a protocol policy cannot name).
func ContainerPort(name string, containerPort int, protocol string, hostPort int, hostIP string) (p WorkloadEndpointPort, ok bool) {
	if containerPort <= 0 || containerPort > 65535 || (name == "" && hostPort == 0) {
		return p, false
	}
	switch protocol {
	case "", ProtocolTCP:
		protocol = ProtocolTCP
	case ProtocolUDP, ProtocolSCTP:
	default:
		return p, false
	}
	return WorkloadEndpointPort{Name: name, Protocol: ProtocolFromName(protocol),
		Port: uint16(containerPort), HostPort: uint16(min(max(hostPort, 0), 65535)), HostIP: hostIP}, true
}
