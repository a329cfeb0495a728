package policy

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"strings"

	"github.com/routed-net/routed/pkg/api"
)

// SetUnreadableEndpoint fails closed for a WorkloadEndpoint record that
// is stored but does not decode, names another object, or that felix
// refused: what it says of its pod's labels, profiles and service
// account is unknown, so a Deny rule that picks the pod by them could
// be what stops its traffic, and, left out, the pod's addresses would
// be no endpoint's. The caller removes the record's previous version
// (it is not the record's now): on its own node the pod's interface
// then has no rules and drops, which is what holds whatever the record
// says. On top of that, until the record is set again or deleted, a
// policy in UnreadableTier, before every tier, denies at every workload
// endpoint the traffic from and to DeniableAddrs(known, read): known,
// the addresses of the last version of it that was readable
// (EndpointAddrs, taken before removing it; they are kept through
// later unreadable versions), and read, those read from this record
// (SalvageEndpointAddrs, RefusedEndpointAddrs). Other traffic goes on
// to the next tier (UnreadableTier passes at its end). With no address
// known, nothing more is denied here: a deny of all traffic (or of
// 0.0.0.0/0) would let anyone who can write one endpoint record (the
// CNI plugin's credentials) cut off every pod of the cluster; the
// record is listed all the same.
func (m *Manager) SetUnreadableEndpoint(name string, known, read []netip.Prefix, why error) error {
	return m.calc.setUnreadableEndpoint(name, known, read, why)
}

// SetUnreadableEndpoint is Manager.SetUnreadableEndpoint for a model
// (NewModel).
func (c *Calc) SetUnreadableEndpoint(name string, known, read []netip.Prefix, why error) error {
	return c.setUnreadableEndpoint(name, known, read, why)
}

// EndpointAddrs returns the addresses of the last readable version of
// the workload endpoint key: its own while it is readable, those kept
// for its deny while it is not (nil when there are none).
func (m *Manager) EndpointAddrs(key string) []netip.Prefix { return m.calc.EndpointAddrs(key) }

// EndpointAddrs is Manager.EndpointAddrs for a model.
func (c *Calc) EndpointAddrs(key string) []netip.Prefix {
	if e := c.weps.get(key); e != nil {
		return e.ipList()
	}
	return slices.Clone(c.unreadable[UnreadableKey(api.KindWorkloadEndpoint, key)].known)
}

// DeniableAddrs is what the deny for an unreadable WorkloadEndpoint
// covers of known and read: their single addresses (an IPv4-mapped one
// as its IPv4 form), sorted, each once. A pod's addresses are single
// addresses; a wider prefix (0.0.0.0/0 in a record anyone with the CNI
// plugin's credentials can write) would deny for other pods, and is
// left out.
func DeniableAddrs(known, read []netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range append(slices.Clone(known), read...) {
		if !p.IsValid() || !p.IsSingleIP() {
			continue
		}
		a := p.Addr().Unmap()
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return slices.Compact(slices.SortedFunc(slices.Values(out), comparePrefix))
}

func (c *Calc) setUnreadableEndpoint(name string, known, read []netip.Prefix, why error) error {
	key := UnreadableKey(api.KindWorkloadEndpoint, name)
	msg := ""
	if why != nil {
		msg = why.Error()
	}
	if c.unreadable == nil {
		c.unreadable = map[string]UnreadableRecord{}
	}
	known = slices.Clone(known)
	addrs := DeniableAddrs(known, read)
	if len(addrs) == 0 {
		c.DeletePolicy(key)
		c.unreadable[key] = UnreadableRecord{Kind: api.KindWorkloadEndpoint, Name: name, Error: msg, known: known,
			Scope: "its own node's pod alone (its interface drops): no single address of it is known"}
		return nil
	}
	g := &api.GlobalNetworkPolicy{Metadata: api.ObjectMeta{Name: "unreadable-workloadendpoint"}}
	g.Spec.Selector = "all()"
	g.Spec.Types = []api.PolicyType{api.PolicyTypeIngress, api.PolicyTypeEgress}
	// A rule's nets are of one IP version.
	var nets [2][]string
	var names []string
	for _, p := range addrs {
		fam := 0
		if p.Addr().Is6() {
			fam = 1
		}
		nets[fam] = append(nets[fam], p.String())
		names = append(names, p.String())
	}
	for _, n := range nets {
		if len(n) == 0 {
			continue
		}
		g.Spec.Ingress = append(g.Spec.Ingress, api.Rule{Action: api.ActionDeny, Source: api.EntityRule{Nets: n}})
		g.Spec.Egress = append(g.Spec.Egress, api.Rule{Action: api.ActionDeny, Destination: api.EntityRule{Nets: n}})
	}
	np, err := compilePolicy(g)
	if err != nil {
		return fmt.Errorf("policy: the deny for unreadable WorkloadEndpoint %q: %w", name, err)
	}
	// Workloads only: on a host endpoint it would also make forward
	// chains where there were none, which drop at their end.
	np.workloadsOnly = true
	np.key = key
	np.tier, np.order, np.name = UnreadableTier, math.Inf(-1), key
	c.replacePolicy(key, np)
	c.unreadable[key] = UnreadableRecord{Kind: api.KindWorkloadEndpoint, Name: name, Error: msg, known: known,
		Scope: "traffic from and to " + strings.Join(names, ", ") + " at all workload endpoints"}
	return nil
}

// comparePrefix orders prefixes by address, then length.
func comparePrefix(a, b netip.Prefix) int {
	if c := a.Addr().Compare(b.Addr()); c != 0 {
		return c
	}
	return a.Bits() - b.Bits()
}

// SalvageEndpointAddrs reads, from an unreadable WorkloadEndpoint
// record's stored bytes, the addresses its pod has (its ipNetworks),
// each as a prefix, decoded as the record itself is (field names
// matched as encoding/json matches them). It returns none (unknown)
// when the bytes are not JSON, when ipNetworks is not a list, or when
// one of its entries is not an address or a prefix: an address it
// cannot read could be the pod's. A record without addresses says
// none, and is unknown as well. A field of another type elsewhere in
// the record is no matter.
func SalvageEndpointAddrs(raw []byte) []netip.Prefix {
	var rec struct {
		Spec struct {
			IPNetworks []json.RawMessage `json:"ipNetworks"`
		} `json:"spec"`
	}
	var typeErr *json.UnmarshalTypeError
	if err := json.Unmarshal(raw, &rec); err != nil {
		if !errors.As(err, &typeErr) || typeErr.Field == "spec" || strings.HasPrefix(typeErr.Field, "spec.ipNetworks") {
			return nil
		}
	}
	nets := make([]string, len(rec.Spec.IPNetworks))
	for i, r := range rec.Spec.IPNetworks {
		if json.Unmarshal(r, &nets[i]) != nil {
			return nil // not a string: an address it cannot read
		}
	}
	return endpointNets(nets)
}

// RefusedEndpointAddrs is SalvageEndpointAddrs for an endpoint that
// decodes but that felix refuses (SetWorkloadEndpoint): its
// ipNetworks, or none when one of them cannot be read.
func RefusedEndpointAddrs(w *api.WorkloadEndpoint) []netip.Prefix {
	return endpointNets(w.Spec.IPNetworks)
}

// endpointNets reads an endpoint's ipNetworks (endpointNet), or none
// when one of them cannot be read.
func endpointNets(nets []string) []netip.Prefix {
	var out []netip.Prefix
	for _, n := range nets {
		p, ok := endpointNet(n)
		if !ok {
			return nil
		}
		out = append(out, p)
	}
	return out
}

// endpointNet reads an address or a prefix of an endpoint's
// ipNetworks (an IPv4-mapped one as its IPv4 form).
func endpointNet(s string) (netip.Prefix, bool) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		a, err := netip.ParseAddr(s)
		if err != nil || a.Zone() != "" {
			return netip.Prefix{}, false
		}
		p = netip.PrefixFrom(a, a.BitLen())
	}
	a, bits := p.Addr(), p.Bits()
	if a.Is4In6() {
		if bits < 96 {
			return netip.Prefix{}, false
		}
		a, bits = a.Unmap(), bits-96
	}
	return netip.PrefixFrom(a, bits).Masked(), true
}
