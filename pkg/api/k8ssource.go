package api

// What routed's controllers write for a Kubernetes object carries
// KubernetesSourceAnnotation, naming that object ("<namespace>/<name>",
// or "<name>" for a cluster-wide one), beside the owner annotation
// (ControllersOwnerAnnotation).
const KubernetesSourceAnnotation = "routed.io/k8s-source"

// KubernetesNetworkPolicyPrefix starts the name of the NetworkPolicy the
// controllers write for a Kubernetes NetworkPolicy (Calico's
// "knp.default.").
const KubernetesNetworkPolicyPrefix = "knp.default."

// KindKubernetesNetworkPolicy is Calico's kind of a Kubernetes
// NetworkPolicy in felix's policy keys, by which Calico 3.32 and later
// break ties of policy order (no routed resource has this kind).
const KindKubernetesNetworkPolicy = "KubernetesNetworkPolicy"
