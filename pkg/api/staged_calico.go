package api

// Calico's staged policies carry their twins' fields, so what routed
// refuses or drops in a Calico NetworkPolicy or GlobalNetworkPolicy
// (calicoFields) it refuses or drops in the staged form too: a staged
// policy that could not be enforced as written would preview something
// else. A StagedKubernetesNetworkPolicy is read field for field.
func init() {
	calicoFields[KindStagedNetworkPolicy] = calicoFields[KindNetworkPolicy]
	calicoFields[KindStagedGlobalNetworkPolicy] = calicoFields[KindGlobalNetworkPolicy]
}
