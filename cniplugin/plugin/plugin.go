// Package plugin is routed's CNI plugin: it wires a pod into the node's
// routed network (veth pair, /32 address, link-local gateway, host route)
// and records the pod as a WorkloadEndpoint for felix and BGP.
//
// Invariants:
//   - Every verb is a separate function registered with skel; ADD undoes
//     everything it did when it fails (rollback steps run in reverse,
//     guarded by a success flag).
//   - Only objects this plugin created are removed: an interface that
//     already existed, or a route without kernel.RouteProtocol, is never touched.
//   - DEL tolerates anything already gone; an IP is released only after
//     the endpoint that names it is deleted.
//   - No node-wide lock: concurrent ADDs only share the datastore and
//     the IPAM plugin, which are safe for concurrent use.
//   - IPAM goes through ipamBackend: routed-ipam (ipamcore) runs
//     in-process on the invocation's etcd connection, any other
//     ipam.type is executed; either way its errors carry the IPAM
//     plugin's own CNI code and message.
package plugin

import (
	"context"
	"fmt"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/sirupsen/logrus"

	"github.com/routed-net/routed/cniplugin/netconf"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/kernel"
)

// Versions are the CNI spec versions the plugin speaks; results are
// converted to the version the configuration asks for.
var Versions = netconf.Versions

// Store is the part of the datastore the plugin uses.
type Store interface {
	Create(ctx context.Context, r api.Resource) (api.Resource, error)
	Apply(ctx context.Context, r api.Resource) (api.Resource, error)
	Get(ctx context.Context, k api.Kind, name string) (api.Resource, error)
	List(ctx context.Context, k api.Kind) ([]api.Resource, int64, error)
	Delete(ctx context.Context, k api.Kind, name, resourceVersion string) error
	Close() error
}

// PodSource supplies what a pod's WorkloadEndpoint carries from the
// Kubernetes API. It is consulted only when kubernetes.kubeconfig is set
// in the netconf; nil info (no error) means nothing is known.
type PodSource interface {
	PodInfo(ctx context.Context, kubeconfig, namespace, pod string) (*PodInfo, error)
}

// PodInfo is a pod's identity for policy: its labels, its service
// account (spec.serviceAccountName) and its named and host ports.
type PodInfo struct {
	Labels         map[string]string
	ServiceAccount string
	Ports          []api.WorkloadEndpointPort
}

// Main runs the plugin as a CNI executable.
func Main(about string) {
	skel.PluginMainFuncs((&Plugin{}).Funcs(), Versions, about)
}

// call is the state of one invocation shared by the verbs.
type call struct {
	args *skel.CmdArgs
	conf *NetConf
	log  *logrus.Entry
	k8s  K8sArgs
	node string
	// hostVeth is the host-side interface name, derived from the pod.
	hostVeth string
	// orchestrator is "k8s" for pods, "cni" for bare CNI containers.
	orchestrator string
	closeLog     func()
	// started is when the plugin began the call: waits are bounded
	// from it (the runtime's timeout runs from about then).
	started time.Time
	// tm times the call's steps for the debug log.
	tm timings
	// pod is what the pod source said (podInfo), once podRead.
	pod     *PodInfo
	podRead bool
}

// begin parses the configuration and arguments and opens the log. The
// caller must call c.end().
func begin(args *skel.CmdArgs, verb string) (*call, error) {
	conf, err := ParseNetConf(args.StdinData)
	if err != nil {
		return nil, err
	}
	c := &call{args: args, conf: conf, started: time.Now()}
	c.tm.last = procStart
	c.log, c.closeLog = netconf.OpenLog(conf, args.ContainerID, verb)
	if c.k8s, err = ParseK8sArgs(args.Args); err != nil {
		c.end()
		return nil, err
	}
	if c.node, err = conf.NodeName(); err != nil {
		c.end()
		return nil, err
	}
	c.orchestrator = "cni"
	if c.k8s.Pod != "" {
		c.orchestrator = "k8s"
	}
	c.hostVeth = kernel.HostDeviceName(c.k8s.Namespace, c.k8s.Pod, args.ContainerID)
	if conf.Policy.Type == "k8s" {
		c.log.Debug("policy type k8s: felix enforces policy, nothing to do here")
	}
	if c.k8s.Pod != "" {
		c.log = c.log.WithField("pod", c.k8s.Namespace+"/"+c.k8s.Pod)
	}
	c.tm.mark("start")
	return c, nil
}

// runVerb runs one verb: it begins the call (a bad configuration or
// argument is a CNI error), runs do, ends the call, and finishes do's
// error into the CNI error the runtime gets.
func runVerb(args *skel.CmdArgs, verb string, do func(context.Context, *call) error) error {
	c, err := begin(args, verb)
	if err != nil {
		return toCNIError(err)
	}
	defer c.end()
	if err := do(context.Background(), c); err != nil {
		return c.finish(verb, err)
	}
	return nil
}

// end logs the call's timings (at debug) and closes the log.
func (c *call) end() {
	c.log.WithField("timings", c.tm.String()).Debug("timings")
	c.closeLog()
}

// wepName is the datastore name of this attachment's WorkloadEndpoint.
func (c *call) wepName() string {
	return api.WorkloadEndpointName(c.node, c.orchestrator, c.k8s.Namespace, c.k8s.Pod, c.args.ContainerID, c.args.IfName)
}

func (c *call) handle() string { return HandleID(c.conf.Name, c.args.ContainerID) }

// finish logs a failed verb and converts its error to a CNI error.
func (c *call) finish(verb string, err error) error {
	if err == nil {
		return nil
	}
	cerr := toCNIError(err)
	code := uint(types.ErrInternal)
	if te, ok := cerr.(*types.Error); ok {
		code = te.Code
	}
	c.log.WithError(err).Errorf("%s failed (CNI code %d)", verb, code)
	return cerr
}

// describe names the workload for messages meant for operators.
func (c *call) describe() string {
	if c.k8s.Pod != "" {
		return fmt.Sprintf("pod %s/%s", c.k8s.Namespace, c.k8s.Pod)
	}
	return "container " + c.args.ContainerID
}
