package policy

import (
	"crypto/sha256"
	"encoding/base32"
	"strings"
	"sync"
)

// Rule kinds a RuleInfo names.
const (
	KindPolicyRule   = "policy rule"
	KindProfileRule  = "profile rule"
	KindTierEnd      = "tier end"           // no policy of the tier decided
	KindNoProfile    = "no profile allowed" // past the tiers, no profile allowed
	KindUnknownIface = "unknown interface"  // an interface felix has not programmed
	// KindSpoofedSource: a packet from a pod whose source address has no
	// route back through the pod's interface (another pod's address, the
	// host's, any address not the pod's), dropped before any policy
	// (nftdp's reverse-path check). Its direction is "egress" (forwarded)
	// or "to-host" (to the node itself).
	KindSpoofedSource = "spoofed source: the source address is not the pod's"
	// KindWorkloadEncap: IPIP, IPv6-in-IPv4 or UDP to the VXLAN port sent
	// by a pod, dropped before any policy (nftdp/encap.go): the nodes'
	// tunnels would unwrap it from any source. Direction "egress" or
	// "to-host".
	KindWorkloadEncap = "encapsulated: a pod's IPIP or VXLAN packet"
	// KindEncapNotNode: an IPIP packet or UDP to a VXLAN port addressed
	// to the node from a source that is no node's (nor in the external
	// node nets), dropped before the node unwraps it
	// (nftdp/encap_hosts.go). Direction "not-node".
	KindEncapNotNode = "encapsulated: a tunnel packet from a source that is no node's"
	KindNotPoliced   = "not policed" // the address is no workload (explain)
	// KindHostNotExplained: the address is a host endpoint's, whose
	// policy explain does not evaluate (it answers for workloads).
	KindHostNotExplained = "host endpoint: its policy is not explained"
	unknownIfacePfx      = "D unknown-iface "
	spoofedSrcPfx        = "D spoofed-src " // + direction (nftdp/base.go)
	wlEncapPfx           = "D wl-encap "    // + direction (nftdp/encap.go)
	encapSrcPfx          = "D encap-src "   // + "not-node" (nftdp/encap_hosts.go)
	logRulePrefix        = "L "
	logDropRulePrefix    = "D "
	flowRulePrefix       = "F " // a flow verdict mark (LogConfig.FlowGroup)
)

// RuleInfo says what one rule ID stands for in the policy model.
type RuleInfo struct {
	// ID is the rule's counter ID (see Manager.Counters).
	ID   string `json:"id"`
	Kind string `json:"kind"`
	// Tier is the tier of a policy rule or tier end.
	Tier string `json:"tier,omitempty"`
	// Policy is a policy rule's policy as PolicyKey names it
	// ("gnp:<name>", "np:<namespace>/<name>").
	Policy string `json:"policy,omitempty"`
	// Profile is a profile rule's profile.
	Profile   string `json:"profile,omitempty"`
	Direction string `json:"direction"`
	// Index is the rule's place in the policy's or profile's ingress or
	// egress list; -1 for the drops at a tier's or the profiles' end.
	Index int `json:"index"`
	// Action is the rule's action (Allow, Deny, Log, Pass; Deny for the
	// drops at an end).
	Action string `json:"action"`
}

// ruleToken is the short, stable name of a rule ID that nflog prefixes
// carry (a prefix must stay short: policy names run to 253 bytes).
func ruleToken(id string) string {
	h := sha256.Sum256([]byte(id))
	return strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(h[:8]))
}

// EndpointRef names a local endpoint in log records.
type EndpointRef struct {
	Key       string `json:"key"`
	Namespace string `json:"namespace,omitempty"`
	Pod       string `json:"pod,omitempty"`
}

// RuleIndex resolves what nflog carries (a prefix, an interface) to the
// rules and endpoints of the policy model. The calculator keeps it equal
// to the chains it has programmed and the local endpoints; it is safe
// for concurrent use, so the log reader resolves records as they come
// without going through felix's loop.
type RuleIndex struct {
	mu      sync.RWMutex
	byToken map[string]RuleInfo
	byChain map[string][]string
	ifaces  map[string]EndpointRef
}

// NewRuleIndex returns an empty index.
func NewRuleIndex() *RuleIndex {
	return &RuleIndex{byToken: map[string]RuleInfo{}, byChain: map[string][]string{}, ifaces: map[string]EndpointRef{}}
}

func (x *RuleIndex) setChain(chain string, infos map[string]RuleInfo) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.deleteChainLocked(chain)
	toks := make([]string, 0, len(infos))
	for id, ri := range infos {
		t := ruleToken(id)
		x.byToken[t] = ri
		toks = append(toks, t)
	}
	x.byChain[chain] = toks
}

func (x *RuleIndex) deleteChain(chain string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.deleteChainLocked(chain)
}

func (x *RuleIndex) deleteChainLocked(chain string) {
	for _, t := range x.byChain[chain] {
		delete(x.byToken, t)
	}
	delete(x.byChain, chain)
}

func (x *RuleIndex) setIface(iface string, ep EndpointRef) {
	x.mu.Lock()
	x.ifaces[iface] = ep
	x.mu.Unlock()
}

func (x *RuleIndex) deleteIface(iface string) {
	x.mu.Lock()
	delete(x.ifaces, iface)
	x.mu.Unlock()
}

// Resolve reads an nflog prefix: a Log rule's ("L <token>"), a logged
// drop's ("D <token>"), a flow verdict mark's ("F <token>"), or the
// drop of a packet from an unprogrammed interface or from a spoofed
// source ("D unknown-iface <dir>", "D spoofed-src <dir>") or of a
// pod's encapsulated packet ("D wl-encap <dir>") or of a tunnel packet
// from a source that is no node's ("D encap-src not-node"). The verdict
// is "log" for a Log rule (the packet goes on to the next rule), "flow"
// for a flow mark (the rule named decides: its Action says how) and
// "drop" for the others.
func (x *RuleIndex) Resolve(prefix string) (ri RuleInfo, verdict string, ok bool) {
	if dir, isUnknown := strings.CutPrefix(prefix, unknownIfacePfx); isUnknown {
		return RuleInfo{ID: "unknown-iface/" + dir, Kind: KindUnknownIface, Direction: dir, Index: -1, Action: "Deny"}, "drop", true
	}
	if dir, isSpoofed := strings.CutPrefix(prefix, spoofedSrcPfx); isSpoofed {
		return RuleInfo{ID: "spoofed-src/" + dir, Kind: KindSpoofedSource, Direction: dir, Index: -1, Action: "Deny"}, "drop", true
	}
	if dir, isEncap := strings.CutPrefix(prefix, wlEncapPfx); isEncap {
		return RuleInfo{ID: "wl-encap/" + dir, Kind: KindWorkloadEncap, Direction: dir, Index: -1, Action: "Deny"}, "drop", true
	}
	if why, isEncapSrc := strings.CutPrefix(prefix, encapSrcPfx); isEncapSrc {
		return RuleInfo{ID: "encap-src/" + why, Kind: KindEncapNotNode, Direction: why, Index: -1, Action: "Deny"}, "drop", true
	}
	verdict = "drop"
	tok, isLog := strings.CutPrefix(prefix, logRulePrefix)
	if isLog {
		verdict = "log"
	} else if tok, ok = strings.CutPrefix(prefix, flowRulePrefix); ok {
		verdict = "flow"
	} else if tok, ok = strings.CutPrefix(prefix, logDropRulePrefix); !ok {
		return RuleInfo{}, "", false
	}
	x.mu.RLock()
	ri, ok = x.byToken[tok]
	x.mu.RUnlock()
	return ri, verdict, ok
}

// Endpoint returns the local endpoint on a host-side interface.
func (x *RuleIndex) Endpoint(iface string) (EndpointRef, bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	ep, ok := x.ifaces[iface]
	return ep, ok
}
