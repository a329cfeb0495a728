// Package nftdp is the policy dataplane's kernel side: it keeps one
// nftables table per family ("ip routed-policy" and "ip6 routed-policy")
// equal to a desired state of chains, sets and endpoint dispatch entries,
// and touches nothing outside those tables.
//
// Callers describe the state with family-neutral Rules and Members;
// Apply writes the difference to both tables, each in one atomic
// transaction, and Resync first reads the tables back so that anything
// edited, flushed or deleted behind our back is put right. When nothing
// differs neither makes a single write (Writes counts them).
//
// The base chains (see base.go) send every packet from or to an
// interface starting with the workload prefix to its endpoint chain
// through the dispatch maps (dispatch.go), and drop it when the interface has
// no entry: an endpoint is closed until SetEndpoint and Apply have run.
//
// A Dataplane is used from one goroutine.
package nftdp

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/google/nftables"
	"github.com/mdlayher/netlink"
	"github.com/routed-net/routed/pkg/kernel"
	"golang.org/x/sys/unix"
)

// Names of the objects this package owns in its tables.
const (
	DefaultTable = kernel.PolicyTable
	// FromWLIfaces and ToWLIfaces are verdict maps from each workload
	// interface to its chain for each direction (goto): one lookup that
	// any nft lists. The interface -> id -> chain pair of lookups it
	// replaced spared the kernel's table validation on a new element
	// (about 0.1 ms per thousand rules the table holds) but made nft
	// before 2024's releases (Debian 12's 1.0.6) abort on any listing.
	// The CNI plugin reads them (pkg/kernel/policytable): their names
	// are the kernel contract's.
	FromWLIfaces = kernel.PolicyFromWorkloadMap
	ToWLIfaces   = kernel.PolicyToWorkloadMap
	// DefaultPassMark is the mark bit that carries Pass from a policy
	// chain back to its endpoint chain (Calico keeps its bits in
	// 0xffff0000 too; kube-proxy uses 0x4000 and 0x8000).
	DefaultPassMark = 0x00200000
)

// Config says where and how to program.
type Config struct {
	// NetnsFd is the network namespace to program (-1: the caller's).
	NetnsFd int
	// Table is the table name in both families (DefaultTable if empty).
	Table string
	// IfacePrefix starts every workload interface's name (default
	// kernel.HostDevicePrefix, the CNI plugin's).
	IfacePrefix string
	// PassMark is a mark bit this package may use (DefaultPassMark).
	PassMark uint32
	// AcceptMark is the other (DefaultAcceptMark): host endpoints'
	// doNotTrack and preDNAT allows carry it to the later hooks.
	AcceptMark uint32
	// DropLogGroup, when not 0, sends packets dropped because no rule
	// allowed them (unknown interface) to this nflog group.
	DropLogGroup uint16
	// DropLogRate limits that log to packets a second (default 10).
	DropLogRate uint32
	// TunnelIfaces are the node's tunnel and WireGuard devices: a packet
	// arriving on one whose source is a local pod's address (routed
	// through a pod's interface) is spoofed and dropped (base.go).
	TunnelIfaces []string
}

// ErrUnsupported means the kernel has no nf_tables netlink interface.
var ErrUnsupported = errors.New("nftdp: kernel has no nftables support")

// Dataplane keeps the routed-policy tables equal to the desired state.
type Dataplane struct {
	conn *nftables.Conn
	dump *ruleDumper // reads rules back: a resync, Counters
	cfg  Config
	fams []*famTable

	chains    map[string]*chainWant
	sets      map[string]*setWant
	endpoints map[string]epWant
	// epRefs counts the endpoints dispatched to each chain (from and to
	// each count), so that Apply checks only what changed; famRefs
	// counts them per family (index famIdx): an endpoint is dispatched
	// only in the tables of its families.
	epRefs  map[string]int
	famRefs [2]map[string]int
	// encapPorts are the UDP ports dropped from pods as encapsulated
	// (encap.go).
	encapPorts []uint16
	// encapSrc are the allowed outer sources of tunnel packets, sorted
	// (encap_hosts.go); nil until SetEncapSources, when there is no
	// check.
	encapSrc []netip.Prefix
	// tailRefs counts the chains going to each tail chain (tail.go).
	tailRefs map[string]int

	// What changed since the last successful Apply of both families.
	dirtyChains    map[string]bool
	dirtySets      map[string]map[mkey]bool // nil map: the whole set
	dirtyEndpoints map[string]bool
	dirtyRoots     map[string]bool // chains endpoints began or ceased to use

	host hostDispatch // the host endpoints' dispatch (hostep.go)

	writes int
}

type chainWant struct {
	rules []Rule
	keys  []string
	hook  *hook    // base chains only
	tails []string // the tail chains its rules go to (tail.go)
}

type setWant struct {
	kind    SetKind
	members memberMap[int32] // reference counts
	// nets counts the members wider than one address, per family
	// (index famIdx): an address set is an interval set in a family's
	// table only while it holds a net of that family.
	nets [2]int
}

// famIdx indexes per-family counters: 0 for IPv4, 1 for IPv6.
func famIdx(p netip.Prefix) int {
	if p.Addr().Is4() {
		return 0
	}
	return 1
}

// New opens nftables in the configured namespace. Nothing is written
// before the first Apply.
func New(cfg Config) (*Dataplane, error) {
	if cfg.Table == "" {
		cfg.Table = DefaultTable
	}
	if cfg.IfacePrefix == "" {
		cfg.IfacePrefix = kernel.HostDevicePrefix
	}
	if cfg.PassMark == 0 {
		cfg.PassMark = DefaultPassMark
	}
	if cfg.PassMark&(cfg.PassMark-1) != 0 {
		return nil, fmt.Errorf("nftdp: PassMark %#x: must be a single bit", cfg.PassMark)
	}
	if cfg.AcceptMark == 0 {
		cfg.AcceptMark = DefaultAcceptMark
	}
	if cfg.AcceptMark&(cfg.AcceptMark-1) != 0 || cfg.AcceptMark == cfg.PassMark {
		return nil, fmt.Errorf("nftdp: AcceptMark %#x: must be a single bit other than PassMark %#x", cfg.AcceptMark, cfg.PassMark)
	}
	if cfg.DropLogRate == 0 {
		cfg.DropLogRate = 10
	}
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
	if err != nil {
		// The library crashes instead of failing without nfnetlink.
		return nil, fmt.Errorf("%w: %w", ErrUnsupported, err)
	}
	unix.Close(fd)
	opts := []nftables.ConnOption{nftables.AsLasting(), nftables.WithSockOptions(BigBuffers)}
	if cfg.NetnsFd >= 0 {
		opts = append(opts, nftables.WithNetNSFd(cfg.NetnsFd))
	}
	c, err := nftables.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("nftdp: opening nftables: %w", err)
	}
	dump, err := newRuleDumper(cfg.NetnsFd)
	if err != nil {
		c.CloseLasting()
		return nil, err
	}
	d := &Dataplane{
		conn: c, dump: dump, cfg: cfg,
		chains: map[string]*chainWant{}, sets: map[string]*setWant{}, endpoints: map[string]epWant{}, epRefs: map[string]int{},
		famRefs:     [2]map[string]int{{}, {}},
		tailRefs:    map[string]int{},
		dirtyChains: map[string]bool{}, dirtySets: map[string]map[mkey]bool{}, dirtyEndpoints: map[string]bool{}, dirtyRoots: map[string]bool{},
	}
	for _, f := range []*family{ipv4, ipv6} {
		tbl := &nftables.Table{Name: cfg.Table, Family: f.nft}
		d.fams = append(d.fams, &famTable{fam: f, table: tbl, rd: renderer{fam: f, table: tbl, passMark: cfg.PassMark, acceptMark: cfg.AcceptMark}})
	}
	d.addBase()
	return d, nil
}

// sockBuf is the socket buffer size in each direction. A transaction is
// one sendmsg (the whole batch, so that it is atomic) and the kernel
// acknowledges every message in it: a full program of a large node
// (1,000 policies, 10,000 endpoints) is tens of MB. Memory is only used
// while a transaction is in flight.
const sockBuf = 256 << 20

// BigBuffers raises the socket's buffers past the system maximum, which
// CAP_NET_ADMIN (needed for nftables anyway) allows.
func BigBuffers(c *netlink.Conn) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	err = rc.Control(func(fd uintptr) {
		for _, opt := range []int{unix.SO_SNDBUFFORCE, unix.SO_RCVBUFFORCE} {
			if e := unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, opt, sockBuf); e != nil {
				serr = fmt.Errorf("nftdp: raising netlink socket buffers: %w", e)
			}
		}
	})
	if err != nil {
		return err
	}
	return serr
}

// Close releases the netlink sockets; the tables stay and keep enforcing.
func (d *Dataplane) Close() error { return errors.Join(d.conn.CloseLasting(), d.dump.close()) }

// Writes is how many transactions the Dataplane has sent to the kernel.
func (d *Dataplane) Writes() int { return d.writes }

// ErrInternalChain is returned for a chain name this package keeps for
// its own base and dispatch chains.
var ErrInternalChain = errors.New("nftdp: chain name is reserved for the dataplane's own chains")

// SetChain sets a regular chain's rules: endpoints are dispatched to
// such chains; the base, dispatch and tail chains are this package's
// own. A verdict rule with a log goes through a tail chain (tail.go),
// which comes and goes with the rules going to it.
func (d *Dataplane) SetChain(name string, rules []Rule) error {
	if isInternal(name) || isTail(name) {
		return fmt.Errorf("%w: %q", ErrInternalChain, name)
	}
	if err := checkLogs(name, rules); err != nil {
		return err
	}
	keys := make([]string, len(rules))
	for i := range rules {
		keys[i] = rules[i].key()
	}
	old, ok := d.chains[name]
	if ok && slices.Equal(old.keys, keys) {
		return nil
	}
	var had []string
	if ok {
		had = old.tails
	}
	c := &chainWant{rules: rules, keys: keys, tails: tailsOf(rules)}
	d.chains[name] = c
	d.dirtyChains[name] = true
	d.useTails(had, c.tails, rules)
	return nil
}

// DeleteChain removes a chain; a missing one is no change.
func (d *Dataplane) DeleteChain(name string) {
	if c, ok := d.chains[name]; ok && c.hook == nil && !isTail(name) {
		delete(d.chains, name)
		d.dirtyChains[name] = true
		d.useTails(c.tails, nil, nil)
	}
}

// AddSet creates an empty set of that kind (no change if it exists).
func (d *Dataplane) AddSet(name string, kind SetKind) {
	if s, ok := d.sets[name]; ok && s.kind == kind {
		return
	}
	d.sets[name] = &setWant{kind: kind}
	d.dirtySets[name] = nil
}

// DeleteSet removes a set; rules that use it must be gone by the same
// Apply.
func (d *Dataplane) DeleteSet(name string) {
	if _, ok := d.sets[name]; ok {
		delete(d.sets, name)
		d.dirtySets[name] = nil
	}
}

// AddMember adds one reference to m in set name (which must exist).
// Members are reference counted: an address two network sets share, or
// a pod and a network set, stays until the last reference goes.
func (d *Dataplane) AddMember(name string, m Member) {
	s := d.sets[name]
	if s == nil {
		return
	}
	m.Prefix = m.Prefix.Masked()
	k := m.key()
	n, _ := s.members.get(k)
	s.members.put(k, n+1)
	if n == 0 {
		d.memberChanged(name, s, m, k)
	}
}

// RemoveMember drops one reference to m from set name.
func (d *Dataplane) RemoveMember(name string, m Member) {
	s := d.sets[name]
	if s == nil {
		return
	}
	m.Prefix = m.Prefix.Masked()
	k := m.key()
	switch n, _ := s.members.get(k); {
	case n <= 0:
		return
	case n == 1:
		s.members.del(k)
		d.memberChanged(name, s, m, k)
	default:
		s.members.put(k, n-1)
	}
}

func (d *Dataplane) memberChanged(name string, s *setWant, m Member, k mkey) {
	if !m.Prefix.IsSingleIP() {
		// A net covers or uncovers other members: diff the whole set.
		s.nets[famIdx(m.Prefix)] += map[bool]int{true: 1, false: -1}[s.members.has(k)]
		d.dirtySets[name] = nil
		return
	}
	dm, ok := d.dirtySets[name]
	if ok && dm == nil {
		return // already whole
	}
	if dm == nil {
		dm = map[mkey]bool{}
		d.dirtySets[name] = dm
	}
	dm[k] = true
}

// Members returns a copy of a set's desired members (for tests).
func (d *Dataplane) Members(name string) []Member {
	s := d.sets[name]
	if s == nil {
		return nil
	}
	return sortedMembers(func(yield func(Member) bool) {
		for k := range s.members.all() {
			if !yield(k.member()) {
				return
			}
		}
	})
}

// Families says in which address families' tables an endpoint is
// dispatched: those it has addresses in. Its interface has no entry in
// the other family's table, whose base chains drop every workload
// interface they do not know, so that family's traffic from and to it
// is dropped as before, without its chains (or a transaction) there.
type Families uint8

// The families; 0 means both (an endpoint without addresses yet).
const (
	FamilyIPv4 Families = 1 << iota
	FamilyIPv6
	BothFamilies = FamilyIPv4 | FamilyIPv6
)

// FamiliesOf is the families of the given addresses (0 for none).
func FamiliesOf(ps []netip.Prefix) Families {
	var f Families
	for _, p := range ps {
		if p.Addr().Unmap().Is4() {
			f |= FamilyIPv4
		} else {
			f |= FamilyIPv6
		}
	}
	return f
}

// has reports whether fs includes the family of index i (famIdx); no
// family at all counts as both.
func (fs Families) has(i int) bool { return fs == 0 || fs&(1<<i) != 0 }

// SetEndpoint dispatches an interface in the tables of fams (0: both):
// what it sends goes to chain from, what it receives to chain to (both
// set by the same Apply; endpoints with the same policies may share
// them).
func (d *Dataplane) SetEndpoint(iface, from, to string, fams Families) {
	w := epWant{from: from, to: to, fams: fams}
	old, ok := d.endpoints[iface]
	if ok && old == w {
		return
	}
	if ok {
		d.unrefEPChains(old)
	}
	d.endpoints[iface] = w
	for _, c := range []string{w.from, w.to} {
		if d.epRefs[c]++; d.epRefs[c] == 1 {
			d.dirtyRoots[c] = true
		}
		for i, refs := range d.famRefs {
			if w.fams.has(i) {
				if refs[c]++; refs[c] == 1 {
					d.dirtyRoots[c] = true
				}
			}
		}
	}
	d.dirtyEndpoints[iface] = true
}

func (d *Dataplane) unrefEPChains(w epWant) {
	for _, c := range []string{w.from, w.to} {
		if d.epRefs[c]--; d.epRefs[c] <= 0 {
			delete(d.epRefs, c)
			d.dirtyRoots[c] = true
		}
		for i, refs := range d.famRefs {
			if w.fams.has(i) {
				if refs[c]--; refs[c] <= 0 {
					delete(refs, c)
					d.dirtyRoots[c] = true
				}
			}
		}
	}
}

// DeleteEndpoint removes an interface from the dispatch maps: its
// traffic is dropped from the next Apply on.
func (d *Dataplane) DeleteEndpoint(iface string) {
	if w, ok := d.endpoints[iface]; ok {
		d.unrefEPChains(w)
		delete(d.endpoints, iface)
		d.dirtyEndpoints[iface] = true
	}
}

// Apply writes what changed to both tables, one transaction each. On an
// error the family's table is read back in full at the next Apply. Its
// cost follows what changed, not the size of the state: only changed
// endpoints and chains are checked.
func (d *Dataplane) Apply() error {
	for ep := range d.dirtyEndpoints {
		if err := d.checkEndpoint(ep); err != nil {
			return err
		}
	}
	for name := range d.dirtyChains {
		if err := d.checkRefs(name); err != nil {
			return err
		}
	}
	var errs []error
	full := map[*famTable]bool{}
	for _, ft := range d.fams {
		if !ft.loaded {
			if err := d.load(ft); err != nil {
				return err
			}
			full[ft] = true
		}
	}
	for _, ft := range d.fams {
		if err := d.applyFamily(ft, full[ft]); err != nil {
			ft.loaded = false // read the kernel back next time
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	clear(d.dirtyChains)
	clear(d.dirtySets)
	clear(d.dirtyEndpoints)
	clear(d.dirtyRoots)
	return nil
}

// checkEndpoint makes sure an endpoint's chains are wanted regular
// chains.
func (d *Dataplane) checkEndpoint(ep string) error {
	w, ok := d.endpoints[ep]
	if ok && (d.chains[w.from] == nil || d.chains[w.to] == nil || isInternal(w.from) || isInternal(w.to) || isTail(w.from) || isTail(w.to)) {
		return fmt.Errorf("nftdp: endpoint %s: chains %q and %q must be set before it is dispatched to", ep, w.from, w.to)
	}
	return nil
}

// checkRefs makes sure every chain and set a wanted chain refers to is
// wanted too, and that no endpoint is dispatched to a chain that goes:
// the kernel would refuse the whole transaction.
func (d *Dataplane) checkRefs(chain string) error {
	c := d.chains[chain]
	if c == nil {
		if d.epRefs[chain] > 0 {
			for ep, w := range d.endpoints {
				if w.from == chain || w.to == chain {
					return d.checkEndpoint(ep)
				}
			}
		}
		return nil
	}
	for i := range c.rules {
		r := &c.rules[i]
		if r.jumps() && d.chains[r.Target] == nil {
			return fmt.Errorf("nftdp: chain %s rule %d jumps to chain %s, which is not set", chain, i, r.Target)
		}
		if r.tailed() && d.chains[r.tailName()] == nil {
			return fmt.Errorf("nftdp: chain %s rule %d: its tail chain %s is not set", chain, i, r.tailName())
		}
		for _, sd := range []*Side{&r.Src, &r.Dst} {
			names := append(append(append([]string{}, sd.Sets...), sd.NotSets...), sd.NotNamedPortSets...)
			if sd.NamedPortSet != "" {
				names = append(names, sd.NamedPortSet)
			}
			for _, n := range names {
				if d.sets[n] == nil {
					return fmt.Errorf("nftdp: chain %s rule %d uses set %s, which is not set", chain, i, n)
				}
			}
		}
	}
	return nil
}

// Resync reads both tables back from the kernel and writes whatever
// differs from the desired state (nothing, when nothing does).
func (d *Dataplane) Resync() error {
	for _, ft := range d.fams {
		ft.loaded = false
	}
	return d.Apply()
}

// Uninstall removes both tables from the namespace open as netnsFd (-1:
// the caller's). A missing table is success.
func Uninstall(netnsFd int, table string) error {
	d, err := New(Config{NetnsFd: netnsFd, Table: table})
	if err != nil {
		return err
	}
	defer d.Close()
	var errs []error
	for _, ft := range d.fams {
		d.conn.DelTable(ft.table)
		if err := d.conn.Flush(); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("nftdp: removing table %s %s: %w", ft.fam.name, ft.table.Name, err))
		}
	}
	return errors.Join(errs...)
}

func sortedMembers(seq func(func(Member) bool)) []Member {
	var out []Member
	for m := range seq {
		out = append(out, m)
	}
	sortMembers(out)
	return out
}

func sortMembers(ms []Member) {
	slices.SortFunc(ms, func(a, b Member) int {
		if c := a.Prefix.Addr().Compare(b.Prefix.Addr()); c != 0 {
			return c
		}
		if a.Prefix.Bits() != b.Prefix.Bits() {
			return a.Prefix.Bits() - b.Prefix.Bits()
		}
		if a.Proto != b.Proto {
			return int(a.Proto) - int(b.Proto)
		}
		return int(a.Port) - int(b.Port)
	})
}
