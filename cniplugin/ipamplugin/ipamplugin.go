// Package ipamplugin is routed-ipam, the CNI IPAM plugin over pkg/ipam:
// addresses come from routed's IP pools in etcd, held under the handle
// "<network>.<containerID>", one /32 per attachment.
package ipamplugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/sirupsen/logrus"

	"github.com/routed-net/routed/cniplugin/plugin"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/pkg/ipam"
	"github.com/routed-net/routed/pkg/selector"
)

// DefaultGCGrace spares allocations younger than this from GC: an ADD in
// progress allocates before its endpoint exists and before the runtime
// lists the attachment as valid.
const DefaultGCGrace = time.Minute

// IPAMConf is the "ipam" section; field names follow calico-ipam.
type IPAMConf struct {
	Type string `json:"type"`
	// IPv4Pools restricts allocation to these pools (names or CIDRs), in
	// order of preference.
	IPv4Pools []string `json:"ipv4_pools"`
	// AssignIPv4 is accepted for Calico compatibility ("true" or unset).
	AssignIPv4 *string `json:"assign_ipv4"`
	// AssignIPv6 "true" is refused: routed is IPv4-only for now.
	AssignIPv6 *string `json:"assign_ipv6"`
	// GCGraceSeconds overrides DefaultGCGrace; 0 means the default,
	// negative means no grace.
	GCGraceSeconds int `json:"gc_grace_seconds"`
}

type netConf struct {
	plugin.NetConf
	IPAM IPAMConf `json:"ipam"`
}

// Main runs routed-ipam as a CNI executable.
func Main(about string) {
	skel.PluginMainFuncs(skel.CNIFuncs{Add: cmdAdd, Del: cmdDel, Check: cmdCheck, GC: cmdGC, Status: cmdStatus}, plugin.Versions, about)
}

var errConfig = errors.New("routed-ipam: invalid configuration")

// call holds one invocation's parsed input and connections.
type call struct {
	args   *skel.CmdArgs
	conf   *netConf
	k8s    plugin.K8sArgs
	node   string
	log    *logrus.Entry
	ds     *datastore.Client
	ipam   *ipam.Client
	closer func()
}

func begin(args *skel.CmdArgs, verb string) (*call, error) {
	pc, err := plugin.ParseNetConf(args.StdinData)
	if err != nil {
		return nil, err
	}
	conf := &netConf{NetConf: *pc}
	if err := json.Unmarshal(args.StdinData, conf); err != nil {
		return nil, fmt.Errorf("%w: %v", errConfig, err)
	}
	if v := conf.IPAM.AssignIPv6; v != nil && *v == "true" {
		return nil, fmt.Errorf("%w: assign_ipv6 \"true\" is not supported: routed is IPv4-only", errConfig)
	}
	c := &call{args: args, conf: conf}
	var closeLog func()
	c.log, closeLog = plugin.OpenLog(&conf.NetConf, args.ContainerID, "ipam "+verb)
	c.log = c.log.WithField("component", "routed-ipam")
	c.closer = closeLog
	if c.k8s, err = plugin.ParseK8sArgs(args.Args); err != nil {
		c.end()
		return nil, err
	}
	if c.node, err = conf.NodeName(); err != nil {
		c.end()
		return nil, err
	}
	cfg, err := conf.DatastoreConfig()
	if err != nil {
		c.end()
		return nil, err
	}
	if c.ds, err = datastore.New(cfg); err != nil {
		c.end()
		return nil, err
	}
	c.ipam = ipam.New(c.ds)
	closeDS := c.ds.Close
	c.closer = func() { _ = closeDS(); closeLog() }
	return c, nil
}

func (c *call) end() { c.closer() }

func (c *call) handle() string { return ipam.PodHandle(c.conf.Name, c.args.ContainerID) }

// fail logs err and gives it the CNI code an operator and runtime need.
func (c *call) fail(verb string, err error) error {
	code := codeOf(err)
	c.log.WithError(err).Errorf("%s failed (CNI code %d)", verb, code)
	return types.NewError(code, err.Error(), "")
}

func codeOf(err error) uint {
	var te *types.Error
	switch {
	case errors.As(err, &te):
		return te.Code
	case errors.Is(err, datastore.ErrUnavailable), errors.Is(err, ipam.ErrContention):
		return types.ErrTryAgainLater
	case errors.Is(err, errConfig), errors.Is(err, datastore.ErrConfig), errors.Is(err, api.ErrInvalid),
		errors.Is(err, ipam.ErrNoPool), errors.Is(err, ipam.ErrNotInPool), errors.Is(err, ipam.ErrInvalidArgument):
		return types.ErrInvalidNetworkConfig
	}
	return types.ErrInternal
}

func toCNIError(err error) error {
	if err == nil {
		return nil
	}
	return types.NewError(codeOf(err), err.Error(), "")
}

// requestedIP is the fixed address asked for through runtimeConfig.ips
// (the "ips" capability) or CNI_ARGS IP=, if any.
func (c *call) requestedIP() (netip.Addr, error) {
	reqs := c.conf.RuntimeConfig.IPs
	if len(reqs) == 0 {
		reqs = c.k8s.RequestedIP
	}
	switch len(reqs) {
	case 0:
		return netip.Addr{}, nil
	case 1:
	default:
		return netip.Addr{}, fmt.Errorf("%w: %d fixed IPs requested (%s); routed-ipam assigns one IPv4 address", errConfig, len(reqs), strings.Join(reqs, ","))
	}
	s := reqs[0]
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Addr(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil || !a.Is4() {
		return netip.Addr{}, fmt.Errorf("%w: requested IP %q is not an IPv4 address", errConfig, s)
	}
	return a, nil
}

func cmdAdd(args *skel.CmdArgs) error {
	c, err := begin(args, "ADD")
	if err != nil {
		return toCNIError(err)
	}
	defer c.end()
	ctx := context.Background()
	ip, err := c.requestedIP()
	if err != nil {
		return c.fail("ADD", err)
	}
	addrs, err := c.ipam.AutoAssign(ctx, ipam.AssignArgs{
		Node:     c.node,
		HandleID: c.handle(),
		Num:      1,
		Pools:    c.conf.IPAM.IPv4Pools,
		IP:       ip,
		Attrs:    ipam.Attributes{Namespace: c.k8s.Namespace, Pod: c.k8s.Pod},
	})
	if err != nil {
		// A failed assignment may have left part of the request held.
		if _, rerr := c.ipam.ReleaseByHandle(ctx, c.handle()); rerr != nil {
			c.log.WithError(rerr).Warnf("could not release handle %s after the failed assignment; GC will", c.handle())
		}
		return c.fail("ADD", fmt.Errorf("assign an address to handle %s on node %s: %w", c.handle(), c.node, err))
	}
	res := &current.Result{CNIVersion: current.ImplementedSpecVersion}
	for _, a := range addrs {
		res.IPs = append(res.IPs, &current.IPConfig{Address: net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(a.BitLen(), a.BitLen())}})
	}
	c.log.WithField("ips", addrs).Info("assigned")
	return types.PrintResult(res, c.conf.CNIVersion)
}

func cmdDel(args *skel.CmdArgs) error {
	c, err := begin(args, "DEL")
	if err != nil {
		return toCNIError(err)
	}
	defer c.end()
	released, err := c.ipam.ReleaseByHandle(context.Background(), c.handle())
	if err != nil {
		return c.fail("DEL", fmt.Errorf("release handle %s: %w", c.handle(), err))
	}
	c.log.WithField("ips", released).Info("released")
	return nil
}

// cmdCheck verifies that the handle still holds every address of the
// prevResult.
func cmdCheck(args *skel.CmdArgs) error {
	c, err := begin(args, "CHECK")
	if err != nil {
		return toCNIError(err)
	}
	defer c.end()
	if err := c.check(context.Background()); err != nil {
		return c.fail("CHECK", err)
	}
	return nil
}

func (c *call) check(ctx context.Context) error {
	nc := &c.conf.NetConf.NetConf
	if nc.RawPrevResult == nil {
		return fmt.Errorf("%w: CHECK needs prevResult", errConfig)
	}
	if err := version.ParsePrevResult(nc); err != nil {
		return fmt.Errorf("%w: prevResult: %v", errConfig, err)
	}
	prev, err := current.NewResultFromResult(nc.PrevResult)
	if err != nil {
		return fmt.Errorf("%w: prevResult: %v", errConfig, err)
	}
	held, err := c.ipam.IPsByHandle(ctx, c.handle())
	if err != nil {
		return fmt.Errorf("read handle %s: %w", c.handle(), err)
	}
	for _, ipc := range prev.IPs {
		a, ok := netip.AddrFromSlice(ipc.Address.IP)
		if !ok {
			continue
		}
		a = a.Unmap()
		found := false
		for _, h := range held {
			found = found || h == a
		}
		if !found {
			return fmt.Errorf("address %s is not allocated to handle %s (it holds %v)", a, c.handle(), held)
		}
	}
	return nil
}

// cmdGC releases this network's allocations on this node whose container
// is not among the valid attachments: first those a WorkloadEndpoint
// still names, then allocations no endpoint names (older than the grace
// period, since ADD allocates before it writes the endpoint).
func cmdGC(args *skel.CmdArgs) error {
	c, err := begin(args, "GC")
	if err != nil {
		return toCNIError(err)
	}
	defer c.end()
	if err := c.gc(context.Background()); err != nil {
		return c.fail("GC", err)
	}
	return nil
}

func (c *call) gc(ctx context.Context) error {
	valid := map[string]bool{}
	for _, a := range c.conf.ValidAttachments {
		valid[ipam.PodHandle(c.conf.Name, a.ContainerID)] = true
	}
	prefix := c.conf.Name + "."
	stale := map[string]bool{}
	weps, _, err := c.ds.List(ctx, api.KindWorkloadEndpoint)
	if err != nil {
		return fmt.Errorf("list WorkloadEndpoints: %w", err)
	}
	for _, r := range weps {
		w, ok := r.(*api.WorkloadEndpoint)
		if ok && w.Spec.Node == c.node && strings.HasPrefix(w.Spec.Handle, prefix) && !valid[w.Spec.Handle] {
			stale[w.Spec.Handle] = true
		}
	}
	grace := DefaultGCGrace
	switch g := c.conf.IPAM.GCGraceSeconds; {
	case g < 0:
		grace = 0
	case g > 0:
		grace = time.Duration(g) * time.Second
	}
	report, err := c.ipam.Check(ctx, grace)
	if err != nil {
		return fmt.Errorf("find allocations without endpoints: %w", err)
	}
	for _, l := range report.Leaks {
		if l.Node == c.node && strings.HasPrefix(l.Handle, prefix) && !valid[l.Handle] {
			stale[l.Handle] = true
		}
	}
	var errs []error
	for h := range stale {
		ips, err := c.ipam.ReleaseByHandle(ctx, h)
		if err != nil {
			errs = append(errs, fmt.Errorf("release handle %s: %w", h, err))
			continue
		}
		c.log.WithFields(logrus.Fields{"handle": h, "ips": ips}).Info("GC released stale allocation")
	}
	return errors.Join(errs...)
}

// cmdStatus succeeds when the datastore answers and some enabled pool
// (among ipv4_pools, if given) selects this node; otherwise code 50.
func cmdStatus(args *skel.CmdArgs) error {
	c, err := begin(args, "STATUS")
	if err != nil {
		return toCNIError(err)
	}
	defer c.end()
	if err := c.status(context.Background()); err != nil {
		c.log.WithError(err).Error("STATUS: not ready")
		return types.NewError(types.ErrPluginNotAvailable, err.Error(), "")
	}
	return nil
}

func (c *call) status(ctx context.Context) error {
	pools, _, err := c.ds.List(ctx, api.KindIPPool)
	if err != nil {
		return fmt.Errorf("datastore at %s is not usable: %w", c.conf.EtcdEndpoints, err)
	}
	var labels map[string]string
	if n, err := c.ds.Get(ctx, api.KindNode, c.node); err == nil {
		labels = n.Meta().Labels
	} else if !datastore.IsNotFound(err) {
		return fmt.Errorf("read node %s: %w", c.node, err)
	}
	var why []string
	for _, r := range pools {
		p, ok := r.(*api.IPPool)
		if !ok || !wanted(p, c.conf.IPAM.IPv4Pools) {
			continue
		}
		sel, err := selector.Parse(p.Spec.NodeSelector)
		switch {
		case p.Spec.Disabled:
			why = append(why, fmt.Sprintf("pool %s is disabled", p.Metadata.Name))
		case err != nil:
			why = append(why, fmt.Sprintf("pool %s: bad nodeSelector: %v", p.Metadata.Name, err))
		case !sel.Evaluate(labels):
			why = append(why, fmt.Sprintf("pool %s: nodeSelector %q does not select node %s", p.Metadata.Name, p.Spec.NodeSelector, c.node))
		default:
			return nil
		}
	}
	if len(why) == 0 {
		why = []string{"no IP pool exists" + poolsNote(c.conf.IPAM.IPv4Pools)}
	}
	return fmt.Errorf("no IP pool can serve node %s: %s", c.node, strings.Join(why, "; "))
}

func wanted(p *api.IPPool, refs []string) bool {
	if len(refs) == 0 {
		return true
	}
	for _, r := range refs {
		if r == p.Metadata.Name || r == p.Spec.CIDR {
			return true
		}
	}
	return false
}

func poolsNote(refs []string) string {
	if len(refs) == 0 {
		return ""
	}
	return " among ipv4_pools " + strings.Join(refs, ",")
}
