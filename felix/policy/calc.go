package policy

import (
	"hash/maphash"
	"math"
	"slices"
	"strconv"

	"github.com/routed-net/routed/felix/policy/nftdp"
	"github.com/routed-net/routed/pkg/api"
)

// Sink receives the desired dataplane state; *nftdp.Dataplane is one.
type Sink interface {
	SetChain(name string, rules []nftdp.Rule) error
	DeleteChain(name string)
	AddSet(name string, kind nftdp.SetKind)
	DeleteSet(name string)
	AddMember(set string, m nftdp.Member)
	RemoveMember(set string, m nftdp.Member)
	SetEndpoint(iface, fromChain, toChain string, fams nftdp.Families)
	DeleteEndpoint(iface string)
}

// Calc keeps the policy model and writes the state it implies to a Sink,
// incrementally: a new endpoint changes the members of the sets that
// select it and, if local, its own chains and dispatch entry; a policy
// edit re-renders that policy's chains and the chains of the local
// endpoints whose policy list changed. It is used from one goroutine.
type Calc struct {
	sink  Sink
	log   LogConfig
	index *RuleIndex

	tiers    map[string]tierInfo
	policies map[string]*cpolicy
	// unreadable are the records denied for (SetUnreadable), by the
	// key of their deny's policy.
	unreadable map[string]UnreadableRecord
	ordered    []*cpolicy // every policy in evaluation order
	profiles   map[string]*profile
	netsets    map[string]*netset
	// eps are the host endpoints, weps the workloads' (eptable.go):
	// read them through endpoint and allEndpoints.
	eps    map[string]*endpoint
	weps   *epTable
	recs   epRecords // the workload endpoints' records and keys
	locals map[string]*local
	sets   map[string]*aset
	// Local endpoints referring to each profile name (existing or not).
	profileRefs map[string]int
	// The scopes whose labels read each profile name (existing or not;
	// see profileNames), so that a profile change re-derives only those.
	profileUsers map[string][]*groupScope
	// Local endpoints dispatched to each endpoint chain: endpoints with
	// the same policies and profiles share their chains.
	epChainRefs map[string]int
	// The guarded runs each endpoint chain has, the endpoint chains'
	// references to each run chain, and the guard sets (calc_guard.go).
	epChainRuns map[string][]guardRun
	runRefs     map[string]int
	guards      map[string]*guard
	// The endpoints' groups and what sets and policies select of each
	// (calc_index.go), and the label sets they share (labelset.go).
	groups    groupIndex
	labelSets labelSets
	keys      *labelKeys // of the groups' own labels
	// The endpoints of the Services rules name (calc_service.go).
	services map[string]*service
	// This node's host endpoints and their failsafe ports (calc_hostep.go).
	hosts hostState
	// encapPorts are the UDP ports dropped from pods as encapsulation
	// (explain_encap.go; nil: nftdp's default).
	encapPorts []uint16
	// at finds endpoints and network sets by address (models only:
	// addr_index.go).
	at *addrIndex
}

// local is a local endpoint, its interface and pod, what applies to
// it, and the chains its traffic is dispatched to (index 0: what it
// sends, 1: what it receives).
type local struct {
	ep         *endpoint
	iface, pod string
	in, out    []*cpolicy
	chains     [2]string
}

// aset is a set some active chain uses, with the members each network
// set contributes (by key), and the guard sets its members also go to
// (calc_guard.go). What endpoints contribute is not kept: it is the
// members of every endpoint whose group the set's matcher picks (see
// SetEndpoint).
type aset struct {
	spec  setSpec
	refs  int
	nets  map[string][]nftdp.Member
	feeds []string
}

// NewCalc returns a calculator writing to sink, with Calico's default
// tiers.
func NewCalc(sink Sink, lc LogConfig) *Calc {
	c := &Calc{
		sink: sink, log: lc, index: NewRuleIndex(),
		tiers: map[string]tierInfo{}, policies: map[string]*cpolicy{}, profiles: map[string]*profile{},
		netsets: map[string]*netset{}, eps: map[string]*endpoint{}, locals: map[string]*local{},
		sets: map[string]*aset{}, profileRefs: map[string]int{}, profileUsers: map[string][]*groupScope{}, epChainRefs: map[string]int{},
		epChainRuns: map[string][]guardRun{}, runRefs: map[string]int{}, guards: map[string]*guard{},
	}
	seed := maphash.MakeSeed()
	c.groups = groupIndex{seed: seed, byHash: map[uint64][]*group{}, scopes: map[uint64][]*groupScope{}}
	c.weps = newEPTable(seed)
	c.keys = newLabelKeys()
	c.labelSets = newLabelSets(seed)
	for _, t := range api.DefaultTiers() {
		c.tiers[t.Metadata.Name] = compileTier(t)
	}
	return c
}

func compileTier(t *api.Tier) tierInfo {
	ti := tierInfo{order: math.Inf(1)}
	if t.Spec.Order != nil {
		ti.order = *t.Spec.Order
	}
	ti.pass = t.Spec.DefaultAction != nil && *t.Spec.DefaultAction == api.ActionPass
	return ti
}

// tier returns a tier's info; a tier that does not exist sorts last and
// drops at its end, so a policy in it still denies what it denies.
// UnreadableTier sorts first and passes at its end: its policies deny
// all they select (unreadable policies, host endpoints), or, for an
// unreadable WorkloadEndpoint, the traffic of its addresses, and
// nothing else may stop there.
func (c *Calc) tier(name string) tierInfo {
	if name == UnreadableTier {
		return tierInfo{order: math.Inf(-1), pass: true}
	}
	if t, ok := c.tiers[name]; ok {
		return t
	}
	return tierInfo{order: math.Inf(1)}
}

// less orders policies as Calico evaluates them: tier order, tier name,
// policy order, policy name (tieName), then the key.
func (c *Calc) less(a, b *cpolicy) int {
	ta, tb := c.tier(a.tier), c.tier(b.tier)
	switch {
	case ta.order != tb.order:
		return cmpF(ta.order, tb.order)
	case a.tier != b.tier:
		return cmpS(a.tier, b.tier)
	case a.order != b.order:
		return cmpF(a.order, b.order)
	case a.name != b.name:
		return cmpS(a.name, b.name)
	}
	// Equal tie names (a NetworkPolicy that carries the controllers'
	// annotations of the Kubernetes policy of the same name): the key
	// decides, the same on every node and in explain.
	return cmpS(a.key, b.key)
}

func cmpF(a, b float64) int {
	if a < b {
		return -1
	}
	return 1
}

func cmpS(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func (c *Calc) sortPolicies() {
	c.groups.polGen++
	c.ordered = c.ordered[:0]
	for _, p := range c.policies {
		c.ordered = append(c.ordered, p)
	}
	slices.SortFunc(c.ordered, c.less)
}

// SetTier adds or changes a tier: every local endpoint's chains follow.
func (c *Calc) SetTier(t *api.Tier) {
	c.tiers[t.Metadata.Name] = compileTier(t)
	c.resortAll()
}

// DeleteTier removes a tier; its policies sort last and still deny.
func (c *Calc) DeleteTier(name string) {
	delete(c.tiers, name)
	c.resortAll()
}

func (c *Calc) resortAll() {
	c.sortPolicies()
	for _, l := range c.locals {
		slices.SortFunc(l.in, c.less)
		slices.SortFunc(l.out, c.less)
		c.renderEndpoint(l)
	}
	for key := range c.hosts.eps {
		c.rehost(key)
	}
}

// SetPolicy adds or replaces a policy. On an error nothing changes.
func (c *Calc) SetPolicy(p api.Policy) error {
	np, err := compilePolicy(p)
	if err != nil {
		return err
	}
	c.replacePolicy(np.key, np)
	return nil
}

// DeletePolicy removes a policy by PolicyKey; a missing one is no change.
func (c *Calc) DeletePolicy(key string) { c.replacePolicy(key, nil) }

func (c *Calc) replacePolicy(key string, np *cpolicy) {
	old := c.policies[key]
	if old == nil && np == nil {
		return
	}
	c.groups.polGen++ // the policy lists hold the old version
	if old != nil && np != nil && sameSelection(old, np) {
		c.replaceRules(old, np)
		if !sameGuards(old, np) {
			c.reguard(np)
		}
		return
	}
	if old != nil {
		if i := slices.Index(c.ordered, old); i >= 0 {
			c.ordered = slices.Delete(c.ordered, i, i+1)
		}
	}
	if np != nil {
		c.policies[key] = np
		c.ordered = insertSorted(c.ordered, np, c.less)
	} else {
		delete(c.policies, key)
	}
	var affected []*local
	for k, l := range c.locals {
		was := old != nil && old.selected[k]
		sel := np != nil && np.picks(l.ep.g)
		if !was && !sel {
			continue
		}
		l.in = slices.DeleteFunc(l.in, func(p *cpolicy) bool { return p == old })
		l.out = slices.DeleteFunc(l.out, func(p *cpolicy) bool { return p == old })
		if sel {
			np.selected[k] = true
			if np.hasIn {
				l.in = insertSorted(l.in, np, c.less)
			}
			if np.hasOut {
				l.out = insertSorted(l.out, np, c.less)
			}
		}
		affected = append(affected, l)
	}
	hosts := c.reselectHosts(old, np)
	// New sets are referenced before old ones are released, so a set
	// both versions use is never emptied and refilled.
	if np != nil && len(np.selected) > 0 {
		c.activate(np)
	}
	if old != nil && len(old.selected) > 0 {
		for _, in := range []bool{true, false} {
			if old.applies(in) && (np == nil || len(np.selected) == 0 || !np.applies(in) || np.chain(in) != old.chain(in)) {
				c.deleteChain(old.chain(in))
			}
		}
		c.unrefSets(old.sets())
	}
	for _, l := range affected {
		c.renderEndpoint(l)
	}
	for _, h := range hosts {
		c.updateHost(h)
	}
}

// sameSelection reports whether two versions of a policy select the
// same endpoints in the same directions at the same place in the
// evaluation order: then only their rules differ.
func sameSelection(a, b *cpolicy) bool {
	return a.sel.id == b.sel.id && a.workloadsOnly == b.workloadsOnly && a.hostsOnly == b.hostsOnly && a.tier == b.tier && a.order == b.order && a.name == b.name &&
		a.hasIn == b.hasIn && a.hasOut == b.hasOut && a.host == b.host
}

// replaceRules swaps in a policy version whose selection is the old
// one's (see sameSelection): its chains are re-rendered under the same
// names, and no endpoint's policy list or endpoint chain changes, so a
// rule edit costs the policy's own chains, not a pass over the local
// endpoints.
func (c *Calc) replaceRules(old, np *cpolicy) {
	np.selected = old.selected
	c.policies[np.key] = np
	if i := slices.Index(c.ordered, old); i >= 0 {
		c.ordered[i] = np
	}
	for k := range np.selected {
		l := c.locals[k]
		if l == nil {
			c.swapHostPolicy(k, old, np)
			continue
		}
		for _, ps := range [][]*cpolicy{l.in, l.out} {
			if i := slices.Index(ps, old); i >= 0 {
				ps[i] = np
			}
		}
	}
	if len(np.selected) > 0 {
		c.activate(np)
		c.unrefSets(old.sets())
	}
}

func insertSorted(ps []*cpolicy, p *cpolicy, less func(a, b *cpolicy) int) []*cpolicy {
	i, _ := slices.BinarySearchFunc(ps, p, less)
	return slices.Insert(ps, i, p)
}

// activate references a policy's sets and renders its chains.
func (c *Calc) activate(p *cpolicy) {
	c.refSets(p.sets())
	c.fillServiceSets(p.sets())
	for _, in := range []bool{true, false} {
		if !p.applies(in) {
			continue
		}
		rules, infos := c.policyChain(p, in)
		c.setChain(p.chain(in), rules, infos)
	}
}

// policyChain renders a policy's chain for one direction, with what
// each rule ID stands for.
func (c *Calc) policyChain(p *cpolicy, in bool) ([]nftdp.Rule, map[string]RuleInfo) {
	var rules []nftdp.Rule
	infos := map[string]RuleInfo{}
	for i, r := range p.rules(in) {
		id := p.chain(in) + "/" + strconv.Itoa(i)
		infos[id] = RuleInfo{ID: id, Kind: KindPolicyRule, Tier: p.tier, Policy: p.key, Direction: dirName(in), Index: i, Action: string(r.action)}
		rules = append(rules, c.log.expand(r, id, logRulePrefix+ruleToken(id), false)...)
	}
	return p.host.allows(rules), infos
}

// setChain writes a chain and records what its rule IDs stand for. A
// chain the sink refuses (a rule it cannot write: a bug, never user
// input) fails closed: it becomes a single drop, so the chain never
// keeps the rules it held before, and the error is logged.
func (c *Calc) setChain(name string, rules []nftdp.Rule, infos map[string]RuleInfo) {
	if err := c.sink.SetChain(name, rules); err != nil {
		hostLog.WithError(err).WithField("chain", name).Error("the dataplane refused a policy chain: it drops every packet until the chain can be written")
		if err := c.sink.SetChain(name, []nftdp.Rule{{Action: nftdp.ActDrop, Counter: true}}); err != nil {
			hostLog.WithError(err).WithField("chain", name).Error("the dataplane refused the drop that replaces a refused chain")
		}
		infos = nil
	}
	c.index.setChain(name, infos)
}

// deleteChain removes a chain and its rules from the index.
func (c *Calc) deleteChain(name string) {
	c.sink.DeleteChain(name)
	c.index.deleteChain(name)
}

// Index is what the calculator has programmed, for resolving nflog
// records; safe for concurrent use.
func (c *Calc) Index() *RuleIndex { return c.index }

func (c *Calc) deactivate(p *cpolicy) {
	for _, in := range []bool{true, false} {
		if p.applies(in) {
			c.deleteChain(p.chain(in))
		}
	}
	c.unrefSets(p.sets())
}

// SetProfile adds or replaces a profile. On an error nothing changes.
func (c *Calc) SetProfile(p *api.Profile) error {
	np, err := compileProfile(p)
	if err != nil {
		return err
	}
	c.replaceProfile(np.name, np)
	return nil
}

// DeleteProfile removes a profile; a missing one is no change.
func (c *Calc) DeleteProfile(name string) { c.replaceProfile(name, nil) }

func (c *Calc) replaceProfile(name string, np *profile) {
	old := c.profiles[name]
	if old == nil && np == nil {
		return
	}
	if np != nil {
		c.profiles[name] = np
	} else {
		delete(c.profiles, name)
	}
	if c.profileRefs[name] > 0 {
		if np != nil {
			c.activateProfile(np)
		}
		if old != nil {
			if np == nil {
				c.deleteChain(old.chain(true))
				c.deleteChain(old.chain(false))
			}
			c.unrefSets(old.sets())
		}
	}
	// Labels flow from profiles to endpoints (and, for namespace
	// profiles, to network sets): re-derive those that use it, when they
	// changed (a snapshot gives every profile again).
	if old != nil && np != nil && old.labels.equal(np.labels) {
		return
	}
	for _, s := range slices.Clone(c.profileUsers[name]) {
		c.rederive(s)
		if (old == nil) != (np == nil) {
			// The endpoints' chains jump to the profile's only while it
			// exists: one that came or went changes them, labels or not.
			for _, g := range s.groups {
				c.rerender(g)
			}
		}
	}
	for _, s := range c.netsets {
		if name == api.NamespaceProfilePrefix+s.Namespace {
			c.SetNetworkSet(s.NetworkSet)
		}
	}
}

func (c *Calc) activateProfile(p *profile) {
	c.refSets(p.sets())
	c.fillServiceSets(p.sets())
	for _, in := range []bool{true, false} {
		rules, infos := c.profileChain(p, in)
		c.setChain(p.chain(in), rules, infos)
	}
}

// profileChain renders a profile's chain for one direction.
func (c *Calc) profileChain(p *profile, in bool) ([]nftdp.Rule, map[string]RuleInfo) {
	var rules []nftdp.Rule
	infos := map[string]RuleInfo{}
	rs := p.egress
	if in {
		rs = p.ingress
	}
	for i, r := range rs {
		id := p.chain(in) + "/" + strconv.Itoa(i)
		infos[id] = RuleInfo{ID: id, Kind: KindProfileRule, Profile: p.name, Direction: dirName(in), Index: i, Action: string(r.action)}
		rules = append(rules, c.log.expand(r, id, logRulePrefix+ruleToken(id), true)...)
	}
	return rules, infos
}

func (c *Calc) refProfile(name string) {
	c.profileRefs[name]++
	if c.profileRefs[name] == 1 && c.profiles[name] != nil {
		c.activateProfile(c.profiles[name])
	}
}

func (c *Calc) unrefProfile(name string) {
	c.profileRefs[name]--
	if c.profileRefs[name] > 0 {
		return
	}
	delete(c.profileRefs, name)
	if p := c.profiles[name]; p != nil {
		c.deleteChain(p.chain(true))
		c.deleteChain(p.chain(false))
		c.unrefSets(p.sets())
	}
}
