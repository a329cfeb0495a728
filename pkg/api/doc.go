// Package api defines routed's resources (IPPool, Node, BGPConfiguration,
// BGPPeer, WorkloadEndpoint, IPAMConfiguration), their validation, and the
// YAML/JSON codec that also reads Calico's projectcalico.org/v3 files.
//
// Every resource is a Kubernetes-style object: apiVersion, kind, metadata
// and spec. The datastore stores them as JSON; ResourceVersion carries the
// etcd mod revision the object was read at and is never stored.
package api
