// Package k8spod is routed-cni's Kubernetes pod source: with
// kubernetes.kubeconfig in the network configuration, ADD reads the pod
// (GET /api/v1/namespaces/NS/pods/NAME) before anything is allocated;
// its labels, service account and named ports go on the WorkloadEndpoint
// (through plugin.PodSource) and
// its annotations steer IPAM:
//
//   - cni.projectcalico.org/ipAddrs or routed.io/ipAddrs: a JSON list
//     with the pod's fixed addresses, one per family at most, e.g.
//     ["10.244.1.5", "fd00:10:244::5"];
//   - cni.projectcalico.org/ipv4pools and ipv6pools (or routed.io/...):
//     JSON lists of pool names or CIDRs; on the pod, else on its
//     namespace (routed-ipam only).
//
// They reach IPAM the way a runtime's requests do, by rewriting the
// invocation's stdin (runtimeConfig.ips, ipam.ipv4_pools, ipam.ipv6_pools), so the
// in-process routed-ipam and an executed IPAM plugin see the same thing.
//
// It talks to the API server with net/http and a kubeconfig parsed with
// sigs.k8s.io/yaml, not client-go: routed-cni starts once per pod and its
// start-up is benchmarked.
//
// Errors: a malformed annotation or an unusable kubeconfig, credentials
// or RBAC is CNI code 7; an API server that cannot be reached now
// (refused, timed out, 429, 5xx) is 11; anything else 999. Each fails
// the ADD before IPAM runs, so nothing is left allocated.
package k8spod

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/sirupsen/logrus"

	"github.com/routed-net/routed/cniplugin/ipamcore"
	"github.com/routed-net/routed/cniplugin/netconf"
	"github.com/routed-net/routed/cniplugin/plugin"
	"github.com/routed-net/routed/pkg/api"
)

// Sentinels; CNIError maps them to CNI codes.
var (
	// ErrConfig: the kubeconfig, its credentials or the RBAC it is
	// granted cannot work (code 7).
	ErrConfig = errors.New("k8spod: unusable Kubernetes API configuration")
	// ErrAnnotation: an annotation routed reads is malformed (code 7).
	ErrAnnotation = errors.New("k8spod: malformed annotation")
	// ErrUnavailable: the API server cannot be reached or is overloaded
	// now; the runtime should retry (code 11).
	ErrUnavailable = errors.New("k8spod: Kubernetes API server unavailable")
	// ErrNotFound: the pod or namespace does not exist (code 999).
	ErrNotFound = errors.New("k8spod: not found")
	// ErrAPI: any other unexpected answer (code 999).
	ErrAPI = errors.New("k8spod: unexpected API server answer")
)

// DefaultTimeout bounds each API request.
const DefaultTimeout = 10 * time.Second

// CNIError gives err its CNI code; the message is the whole chain.
func CNIError(err error) error {
	if err == nil {
		return nil
	}
	var te *types.Error
	if errors.As(err, &te) {
		return te
	}
	code := uint(types.ErrInternal)
	switch {
	case errors.Is(err, ErrConfig), errors.Is(err, ErrAnnotation):
		code = types.ErrInvalidNetworkConfig
	case errors.Is(err, ErrUnavailable):
		code = types.ErrTryAgainLater
	}
	return types.NewError(code, err.Error(), "")
}

// Source reads pods and namespaces from the API server a kubeconfig
// names. It remembers what it read for the life of the process (one CNI
// invocation), so the ADD hook and PodLabels cost one GET. It is safe
// for concurrent use.
type Source struct {
	// Timeout bounds each request; 0 means DefaultTimeout.
	Timeout time.Duration

	mu      sync.Mutex
	clients map[string]*client
	objects map[string]*Object
}

// NewSource returns an empty Source.
func NewSource() *Source { return &Source{} }

var _ plugin.PodSource = (*Source)(nil)

// PodInfo returns what the pod's WorkloadEndpoint carries from it: its
// labels, service account and named or host ports. A kubeconfig path
// that does not exist yields nil, as before this source existed (see
// Funcs). Errors carry their CNI code.
func (s *Source) PodInfo(ctx context.Context, kubeconfig, namespace, pod string) (*plugin.PodInfo, error) {
	if missing(kubeconfig) {
		return nil, nil
	}
	o, err := s.Pod(ctx, kubeconfig, namespace, pod)
	if err != nil {
		return nil, CNIError(err)
	}
	info := &plugin.PodInfo{Labels: make(map[string]string, len(o.Metadata.Labels)), ServiceAccount: o.Spec.ServiceAccountName}
	for k, v := range o.Metadata.Labels {
		info.Labels[k] = v
	}
	info.Ports = endpointPorts(append(slices.Clone(o.Spec.Containers), o.Spec.InitContainers...))
	return info, nil
}

// endpointPorts lists the container ports policy can refer to, as
// Calico lists them: those with a name or a host port; the protocol
// defaults to TCP, and ports of protocols policy cannot name are left
// out.
func endpointPorts(containers []Container) []api.WorkloadEndpointPort {
	var out []api.WorkloadEndpointPort
	for _, c := range containers {
		for _, p := range c.Ports {
			if wp, ok := api.ContainerPort(p.Name, p.ContainerPort, p.Protocol, p.HostPort, p.HostIP); ok {
				out = append(out, wp)
			}
		}
	}
	return out
}

// Pod reads a pod, once per process.
func (s *Source) Pod(ctx context.Context, kubeconfig, namespace, name string) (*Object, error) {
	if !validName(namespace) || !validName(name) {
		return nil, fmt.Errorf("%w: CNI_ARGS K8S_POD_NAMESPACE=%q K8S_POD_NAME=%q is not a Kubernetes pod name", ErrConfig, namespace, name)
	}
	return s.get(ctx, kubeconfig, podPath(namespace, name), "pod "+namespace+"/"+name)
}

// Namespace reads a namespace, once per process.
func (s *Source) Namespace(ctx context.Context, kubeconfig, name string) (*Object, error) {
	if !validName(name) {
		return nil, fmt.Errorf("%w: %q is not a Kubernetes namespace name", ErrConfig, name)
	}
	return s.get(ctx, kubeconfig, namespacePath(name), "namespace "+name)
}

func (s *Source) get(ctx context.Context, kubeconfig, path, what string) (*Object, error) {
	key := kubeconfig + "\x00" + path
	s.mu.Lock()
	o, ok := s.objects[key]
	s.mu.Unlock()
	if ok {
		return o, nil
	}
	c, err := s.client(kubeconfig)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout())
	defer cancel()
	o, err = c.get(ctx, path, what)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.objects == nil {
		s.objects = map[string]*Object{}
	}
	s.objects[key] = o
	return o, nil
}

func (s *Source) client(kubeconfig string) (*client, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.clients[kubeconfig]; ok {
		return c, nil
	}
	c, err := loadKubeconfig(kubeconfig, s.timeout())
	if err != nil {
		return nil, err
	}
	if s.clients == nil {
		s.clients = map[string]*client{}
	}
	s.clients[kubeconfig] = c
	return c, nil
}

func (s *Source) timeout() time.Duration {
	if s.Timeout > 0 {
		return s.Timeout
	}
	return DefaultTimeout
}

// missing reports whether the kubeconfig file does not exist. Such a
// configuration (a conflist written for a cluster without the installer's
// kubeconfig) keeps working without pod labels or annotations, as it did
// before the plugin read pods; any other problem with the file fails.
func missing(kubeconfig string) bool {
	_, err := os.Stat(kubeconfig)
	return errors.Is(err, os.ErrNotExist)
}

// Funcs returns p's verbs with ADD preceded by the pod lookup. p.Pods
// should be s, so the endpoint's identity comes from the pod already read.
func (s *Source) Funcs(p *plugin.Plugin) skel.CNIFuncs {
	f := p.Funcs()
	next := f.Add
	f.Add = func(args *skel.CmdArgs) error { return s.add(args, next) }
	return f
}

// add reads the pod and applies its annotations to a copy of args, then
// runs the plugin's ADD with it. Configuration the plugin itself refuses
// is left for it to report.
func (s *Source) add(args *skel.CmdArgs, next func(*skel.CmdArgs) error) error {
	conf, err := plugin.ParseNetConf(args.StdinData)
	if err != nil || conf.Kubernetes.Kubeconfig == "" {
		return next(args)
	}
	k8s, err := plugin.ParseK8sArgs(args.Args)
	if err != nil || k8s.Pod == "" {
		return next(args)
	}
	log, closeLog := netconf.OpenLog(conf, args.ContainerID, "ADD")
	log = log.WithFields(logrus.Fields{"pod": k8s.Namespace + "/" + k8s.Pod, "component": "k8spod"})
	stdin, err := s.prepare(context.Background(), conf, k8s, args.StdinData, log)
	if err != nil {
		cerr := CNIError(err)
		log.WithError(err).Errorf("ADD failed before IPAM (CNI code %d)", cerr.(*types.Error).Code)
		closeLog()
		return cerr
	}
	closeLog()
	a := *args
	a.StdinData = stdin
	return next(&a)
}

// prepare reads the pod (and, for pools, its namespace) and returns the
// stdin IPAM should see.
func (s *Source) prepare(ctx context.Context, conf *plugin.NetConf, k8s plugin.K8sArgs, stdin []byte, log *logrus.Entry) ([]byte, error) {
	kc := conf.Kubernetes.Kubeconfig
	if missing(kc) {
		log.Warnf("kubernetes.kubeconfig %s does not exist: pod labels and IPAM annotations are not read (the install-cni init container writes it)", kc)
		return stdin, nil
	}
	start := time.Now()
	pod, err := s.Pod(ctx, kc, k8s.Namespace, k8s.Pod)
	if err != nil {
		return nil, err
	}
	owner := "pod " + k8s.Namespace + "/" + k8s.Pod
	var req Request
	if req.IPs, err = ParseIPAddrs(pod.Metadata.Annotations, owner); err != nil {
		return nil, err
	}
	if req.Pools4, req.Pools6, err = ParsePools(pod.Metadata.Annotations, owner); err != nil {
		return nil, err
	}
	req.PoolsFrom = owner
	usesPools := conf.IPAM.Type == ipamcore.PluginName
	// Each family's pools come from the pod's annotation, else from its
	// namespace's, as Calico reads them.
	if (req.Pools4 == nil || req.Pools6 == nil) && usesPools {
		nsObj, err := s.Namespace(ctx, kc, k8s.Namespace)
		if err != nil {
			return nil, err
		}
		nsName := "namespace " + k8s.Namespace
		ns4, ns6, err := ParsePools(nsObj.Metadata.Annotations, nsName)
		if err != nil {
			return nil, err
		}
		switch {
		case req.Pools4 == nil && req.Pools6 == nil:
			req.PoolsFrom = nsName
		case (req.Pools4 == nil && ns4 != nil) || (req.Pools6 == nil && ns6 != nil):
			req.PoolsFrom = owner + " and " + nsName
		}
		if req.Pools4 == nil {
			req.Pools4 = ns4
		}
		if req.Pools6 == nil {
			req.Pools6 = ns6
		}
	}
	if (req.Pools4 != nil || req.Pools6 != nil) && !usesPools {
		log.Warnf("%s asks for IP pools %v %v, but ipam.type is %s, not %s: ignored", req.PoolsFrom, req.Pools4, req.Pools6, conf.IPAM.Type, ipamcore.PluginName)
		req.Pools4, req.Pools6 = nil, nil
	}
	log.WithField("took", time.Since(start).Round(time.Microsecond)).Debugf("read %s: %d labels, fixed IPs %v, pools %v %v", owner, len(pod.Metadata.Labels), req.IPs, req.Pools4, req.Pools6)
	if req.IPs == nil && req.Pools4 == nil && req.Pools6 == nil {
		return stdin, nil
	}
	return applyRequest(stdin, conf, req, owner)
}

// applyRequest writes the request into the network configuration:
// runtimeConfig.ips (which routed-ipam prefers to CNI_ARGS IP=) and
// ipam.ipv4_pools/ipv6_pools. Every other field is kept as it was.
func applyRequest(stdin []byte, conf *plugin.NetConf, req Request, owner string) ([]byte, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(stdin, &top); err != nil {
		return nil, fmt.Errorf("%w: network configuration: %w", ErrConfig, err)
	}
	if req.IPs != nil {
		var ips []string
		for _, ip := range req.IPs {
			ips = append(ips, ip.String())
		}
		for _, s := range conf.RuntimeConfig.IPs {
			if a, err := addrOf(s); err != nil || !slices.Contains(req.IPs, a) {
				return nil, fmt.Errorf("%w: %s asks for IPs %s, but the runtime asks for %s (runtimeConfig.ips); ask in one place", ErrAnnotation, owner, strings.Join(ips, ","), s)
			}
		}
		if err := setField(top, "runtimeConfig", "ips", ips); err != nil {
			return nil, err
		}
	}
	for field, pools := range map[string][]string{"ipv4_pools": req.Pools4, "ipv6_pools": req.Pools6} {
		if pools == nil {
			continue
		}
		if err := setField(top, "ipam", field, pools); err != nil {
			return nil, err
		}
	}
	b, err := json.Marshal(top)
	if err != nil {
		return nil, fmt.Errorf("%w: encode network configuration: %w", ErrConfig, err)
	}
	return b, nil
}

// setField sets top[section][field] = v, creating the section.
func setField(top map[string]json.RawMessage, section, field string, v any) error {
	m := map[string]json.RawMessage{}
	if raw, ok := top[section]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &m); err != nil {
			return fmt.Errorf("%w: network configuration: %s is not an object: %w", ErrConfig, section, err)
		}
	}
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	m[field] = b
	if top[section], err = json.Marshal(m); err != nil {
		return err
	}
	return nil
}

func addrOf(s string) (netip.Addr, error) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Addr(), nil
	}
	return netip.ParseAddr(s)
}
