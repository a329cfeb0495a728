// Package cniapi is the node-local protocol between the CNI plugins
// (routed-cni, routed-ipam) and routed on the same node: the plugin asks
// routed, over a root-only unix socket, to assign a pod's addresses and
// write its WorkloadEndpoint in one etcd transaction (and to release
// both in one on DEL), instead of connecting to etcd itself.
//
// Requests are JSON over HTTP on the socket (routed serves it with
// net/http; the plugins' client speaks HTTP/1.0, one request per
// connection, without linking net/http: client.go). A plugin that cannot
// reach routed (no socket, nobody accepting, the connection lost
// mid-request) gets ErrUnreachable and does the work itself, under the
// host IPAM lock; every request is keyed by the attachment's handle and
// endpoint name, so doing it again after a lost request is safe.
package cniapi

import (
	"encoding/json"
	"errors"
	"net/netip"
)

// DefaultSocket is where routed serves the plugins (netconf
// "routed_socket", routed --cni-socket).
const DefaultSocket = "/var/run/routed/cni.sock"

// HTTP paths served on the socket.
const (
	PathAdd = "/v1/add"
	PathDel = "/v1/del"
)

// ErrUnreachable means routed did not take the request: the plugin
// should do the work itself.
var ErrUnreachable = errors.New("cniapi: routed is not serving CNI requests")

// Request is one ADD or DEL.
type Request struct {
	// Stdin is the network configuration the plugin was given: routed
	// reads its ipam section and ipam_lock_file as routed-ipam does, so
	// both paths assign alike.
	Stdin       []byte   `json:"stdin"`
	Network     string   `json:"network"`
	ContainerID string   `json:"containerID"`
	Node        string   `json:"node"`
	Namespace   string   `json:"namespace,omitempty"`
	Pod         string   `json:"pod,omitempty"`
	RuntimeIPs  []string `json:"runtimeIPs,omitempty"`
	ArgsIPs     []string `json:"argsIPs,omitempty"`
	// LockDev and LockIno identify the plugin's host IPAM lock file
	// (ipamcore.LockFileID): routed assigns only under a lock on that
	// very file, so it never assigns while a plugin does.
	LockDev uint64 `json:"lockDev"`
	LockIno uint64 `json:"lockIno"`
	// Endpoint (ADD), a WorkloadEndpoint in JSON (api.WorkloadEndpoint),
	// is written with the addresses, which routed fills in as
	// spec.ipNetworks. Empty: addresses only (routed-ipam). It is kept
	// encoded so that this package does not link pkg/api into the
	// socket-only routed-ipam.
	Endpoint json.RawMessage `json:"endpoint,omitempty"`
	// EndpointName (DEL) is deleted with the addresses when it belongs to
	// ContainerID. Empty: addresses only.
	EndpointName string `json:"endpointName,omitempty"`
}

// AddReply is a successful ADD.
type AddReply struct {
	IPs []netip.Addr `json:"ips"`
	// EndpointRevision is the endpoint's ResourceVersion as written.
	EndpointRevision string `json:"endpointRevision,omitempty"`
}

// DelReply is a successful DEL.
type DelReply struct {
	Released []netip.Addr `json:"released"`
	// EndpointOurs is set when the endpoint was ContainerID's (and is now
	// deleted) or did not exist: the host interface is then the
	// container's to delete. Unset: a newer sandbox of the pod owns it.
	EndpointOurs bool `json:"endpointOurs"`
}

// ErrorReply is a failed request: the CNI error code and message the
// plugin reports, or Fallback when the plugin must do the work itself.
type ErrorReply struct {
	Code     uint   `json:"code"`
	Msg      string `json:"msg"`
	Fallback bool   `json:"fallback,omitempty"`
}
