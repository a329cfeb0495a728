package policy

import (
	"context"
	"fmt"
	"net/netip"
	"slices"

	"github.com/sirupsen/logrus"

	"github.com/routed-net/routed/felix/policy/nftdp"
	"github.com/routed-net/routed/pkg/api"
)

// Config configures a Manager.
type Config struct {
	// Dataplane says where to program (namespace, table, mark bit).
	Dataplane nftdp.Config
	// Log configures the Log action and the optional log of drops.
	Log LogConfig
	// FailsafeInbound and FailsafeOutbound are the ports to and from the
	// host no host endpoint policy closes (nil: Calico's defaults,
	// DefaultFailsafeInbound/Outbound; empty: none).
	FailsafeInbound, FailsafeOutbound []HostPort
}

// Manager is the policy dataplane felix's loop drives: it owns a
// calculator and the nftables tables. Setters change the desired state
// only; Apply writes what changed, Resync also reads the tables back.
// One goroutine (felix's loop) owns it.
type Manager struct {
	calc *Calc
	dp   *nftdp.Dataplane
	// hostWarned are the host endpoint warnings logged (manager_hostep.go).
	hostWarned map[string]bool
}

// NewManager opens nftables; nothing is written before the first Apply
// (which also adopts tables a previous process left, without a window).
func NewManager(cfg Config) (*Manager, error) {
	if cfg.Log.Drops && cfg.Log.Group == 0 {
		return nil, fmt.Errorf("%w: log.group must be set (1-65535) to log drops", ErrInvalid)
	}
	if cfg.Log.FlowGroup != 0 && cfg.Log.FlowGroup == cfg.Log.Group {
		return nil, fmt.Errorf("%w: log.flowGroup %d must differ from log.group (flow marks and the policy log are read by different readers)", ErrInvalid, cfg.Log.FlowGroup)
	}
	cfg.Dataplane.DropLogGroup = 0
	if cfg.Log.Drops {
		cfg.Dataplane.DropLogGroup, cfg.Dataplane.DropLogRate = cfg.Log.Group, cfg.Log.Rate
	}
	dp, err := nftdp.New(cfg.Dataplane)
	if err != nil {
		return nil, err
	}
	calc := NewCalc(dp, cfg.Log)
	calc.SetFailsafe(cfg.FailsafeInbound, cfg.FailsafeOutbound)
	return &Manager{calc: calc, dp: dp}, nil
}

// Close releases the netlink socket; the tables stay and keep enforcing.
func (m *Manager) Close() error { return m.dp.Close() }

// SetTier adds or changes a tier (Calico's three exist from the start).
func (m *Manager) SetTier(t *api.Tier) { m.calc.SetTier(t) }

// DeleteTier removes a tier by name.
func (m *Manager) DeleteTier(name string) { m.calc.DeleteTier(name) }

// SetPolicy adds or replaces a NetworkPolicy or GlobalNetworkPolicy; an
// invalid one is refused (ErrInvalid, naming the field) and the previous
// version stays.
func (m *Manager) SetPolicy(p api.Policy) error { return m.calc.SetPolicy(p) }

// DeletePolicy removes a policy by PolicyKey.
func (m *Manager) DeletePolicy(key string) { m.calc.DeletePolicy(key) }

// SetProfile adds or replaces a profile.
func (m *Manager) SetProfile(p *api.Profile) error { return m.calc.SetProfile(p) }

// DeleteProfile removes a profile by name.
func (m *Manager) DeleteProfile(name string) { m.calc.DeleteProfile(name) }

// SetNetworkSet adds or replaces a namespaced network set.
func (m *Manager) SetNetworkSet(s *api.NetworkSet) error {
	ns, err := netsetFromAPI("ns:"+s.Metadata.Namespace+"/"+s.Metadata.Name, s.Metadata.Namespace, s.Metadata.Labels, s.Spec.Nets)
	if err == nil {
		if forged := netsetForgedLabels(s.Metadata.Namespace, s.Metadata.Labels); len(forged) > 0 {
			hostLog.WithFields(logrus.Fields{"networkSet": s.Metadata.Namespace + "/" + s.Metadata.Name, "labels": forged}).
				Warn("NetworkSet labels ignored: a NetworkSet's selectors see projectcalico.org/namespace as its own namespace and no projectcalico.org/serviceaccount, whatever its labels say (as Calico for the namespace)")
		}
		m.calc.SetNetworkSet(ns)
	}
	return err
}

// DeleteNetworkSet removes a namespaced network set.
func (m *Manager) DeleteNetworkSet(namespace, name string) {
	m.calc.DeleteNetworkSet("ns:" + namespace + "/" + name)
}

// SetGlobalNetworkSet adds or replaces a global network set.
func (m *Manager) SetGlobalNetworkSet(s *api.GlobalNetworkSet) error {
	ns, err := netsetFromAPI("gns:"+s.Metadata.Name, "", s.Metadata.Labels, s.Spec.Nets)
	if err == nil {
		m.calc.SetNetworkSet(ns)
	}
	return err
}

// DeleteGlobalNetworkSet removes a global network set.
func (m *Manager) DeleteGlobalNetworkSet(name string) { m.calc.DeleteNetworkSet("gns:" + name) }

func netsetFromAPI(key, ns string, labels map[string]string, nets []string) (NetworkSet, error) {
	s := NetworkSet{Key: key, Namespace: ns, Labels: labels}
	for i, n := range nets {
		p, err := netip.ParsePrefix(n)
		if err != nil {
			return s, fieldErr("spec.nets", i, n, "is not a CIDR")
		}
		s.Nets = append(s.Nets, p.Masked())
	}
	return s, nil
}

// SetWorkloadEndpoint adds or replaces a WorkloadEndpoint; local tells
// whether it is on this node (then its interface is programmed).
func (m *Manager) SetWorkloadEndpoint(w *api.WorkloadEndpoint, local bool) error {
	ep, err := EndpointFromAPI(w, local)
	if err != nil {
		return err
	}
	return m.SetEndpoint(ep)
}

// SetEndpoint adds or replaces an endpoint given in the calculator's
// own form.
func (m *Manager) SetEndpoint(ep Endpoint) error {
	if ep.Key == "" {
		return fieldErr("metadata.name", -1, "", "is required")
	}
	if ep.Local && ep.Iface == "" {
		return fieldErr("spec.interfaceName", -1, "", "is required for a local endpoint")
	}
	m.calc.SetEndpoint(ep)
	return nil
}

// DeleteEndpoint removes an endpoint by key (its WorkloadEndpoint name).
func (m *Manager) DeleteEndpoint(key string) { m.calc.DeleteEndpoint(key) }

// Endpoints returns the keys of every workload endpoint, sorted (host
// endpoints are HostEndpoints').
func (m *Manager) Endpoints() []string {
	return slices.DeleteFunc(m.calc.Endpoints(), IsHostEndpointKey)
}

// Apply writes everything that changed since the last Apply, one
// transaction per family.
func (m *Manager) Apply(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.logHostWarnings()
	return m.dp.Apply()
}

// Resync reads the tables back and rewrites whatever differs; with
// nothing different it writes nothing.
func (m *Manager) Resync(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return m.dp.Resync()
}

// Counters returns packets and bytes per rule ID: "<chain>/<index>" for
// policy and profile rules (pi-/po-<policy key>, pri-/pro-<profile>),
// "<endpoint chain>/tier-end/<tier>" and
// "<endpoint chain>/no-profile-allowed" for drops in the chains that
// endpoints with the same policies share (ep-in-/ep-eg-<hash>), and
// "unknown-iface/<direction>" for interfaces not programmed.
func (m *Manager) Counters() (map[string]nftdp.Counter, error) { return m.dp.Counters(nil) }

// Index resolves nflog prefixes and interfaces to the rules and
// endpoints this Manager programmed; safe for concurrent use.
func (m *Manager) Index() *RuleIndex { return m.calc.Index() }

// Explain evaluates a flow against the model as programmed (see
// Calc.Explain).
func (m *Manager) Explain(f Flow) Explanation { return m.calc.Explain(f) }

// Writes is how many transactions the Manager has sent to the kernel.
func (m *Manager) Writes() int { return m.dp.Writes() }
