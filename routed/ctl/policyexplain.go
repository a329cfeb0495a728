package ctl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/routed-net/routed/felix/policy"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/routed/status"
)

// explainKinds are the resources the policy model is built from.
var explainKinds = []api.Kind{api.KindTier, api.KindGlobalNetworkPolicy, api.KindNetworkPolicy, api.KindProfile,
	api.KindGlobalNetworkSet, api.KindNetworkSet, api.KindWorkloadEndpoint, api.KindServiceEndpoints, api.KindHostEndpoint}

// newExplainCmd is "policy explain", added to statuscli's policy command:
// it reads the datastore and, when it can, the local routed's counters.
func newExplainCmd(connect func() (*datastore.Client, error), out io.Writer) *cobra.Command {
	var output, from string
	var srcPort int
	cmd := &cobra.Command{
		Use:   "explain SRC DST [PROTO[/PORT]]",
		Short: "Which tier, policy and rule decide a flow, in each direction",
		Long: `Evaluates a new connection from SRC to DST against the policy in the
datastore, as felix programs it, and names the rule that decides it at the
source's egress and at the destination's ingress (both must allow it), with
the Pass and Log rules met on the way.

SRC and DST are pods (NAMESPACE/POD), WorkloadEndpoint names, or IP
addresses (an address that is no workload is not policed on its side).
PROTO is tcp, udp, sctp, icmp or icmpv6 (default icmp, an echo request);
PORT is the destination port, or for ICMP the type (icmp/8).

When routed's status socket answers (--status-socket), the decision of each
direction whose endpoint is on that node is checked against the kernel: the
named rule's counter there should have counted packets once the flow was
tried. Traffic from a node to its own pods is never policed and is not what
this answers.

Then, for each staged policy (StagedGlobalNetworkPolicy, StagedNetworkPolicy,
StagedKubernetesNetworkPolicy) that applies to the source's egress or the
destination's ingress, or whose enforced twin does: what the flow would meet
if that staged policy alone were enforced (Set adds or replaces its twin,
Delete removes it), with the rule that would decide, and the flow's fate
with every staged policy enforced at once. Staged policies are never
enforced; their rules have no kernel counter.

--from NAMESPACE/POD (or a WorkloadEndpoint name) names the pod that sends
the packet; SRC must then be an address, the packet's source, which need
not be the pod's. A pod sends only from its own addresses: its node drops a
packet whose source has no route back through the pod's interface before
any policy (counted under spoofed-src/egress, or spoofed-src/to-host when
sent to the node itself). So a source that is not one of the pod's
addresses answers "dropped: spoofed source", except IPv6 link-local
(fe80::/64) sources, :: for ICMPv6 types 131, 135 and 143 (DAD, MLD) and,
in IPv4, 0.0.0.0 as a DHCP request (UDP 68 to 67) to 255.255.255.255 or
224.0.0.0/24, or as IGMP, which pass the check and meet the pod's egress
policy.
What explain cannot see: whether the pod's routes are programmed yet on its
node (until they are, all its packets are dropped).

UDP a pod sends to a VXLAN port (4789 and FelixConfiguration default's
vxlanPort) answers "dropped: encapsulated": nodes drop it before any policy
(wl-encap/egress, or wl-encap/to-host to the node itself), since their
tunnel devices would unwrap it from any source. A node also keeps dropping
every VXLAN port it has used since routed started, which explain cannot know.`,
		Args: cobra.RangeArgs(2, 3),
		RunE: func(cmd *cobra.Command, args []string) error {
			if output != "" && output != "json" {
				return usageError("-o must be json or empty, not %q", output)
			}
			proto := "icmp"
			if len(args) == 3 {
				proto = args[2]
			}
			sock, _ := cmd.Flags().GetString("status-socket")
			c, err := connect()
			if err != nil {
				return err
			}
			defer c.Close()
			q := explainQuery{src: args[0], dst: args[1], proto: proto, srcPort: srcPort, from: from}
			return explain(cmd.Context(), out, c, status.NewClient(status.SocketPath(sock)), q, output == "json")
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "json: the explanation as JSON")
	cmd.Flags().IntVar(&srcPort, "source-port", 0, "the source port (default: none, as an ephemeral port no rule names)")
	cmd.Flags().StringVar(&from, "from", "", "the pod (NAMESPACE/POD or WorkloadEndpoint name) that sends; SRC is then the packet's source address, which need not be the pod's")
	return cmd
}

// ExplainResult is what "policy explain -o json" prints.
type ExplainResult struct {
	Src string `json:"src"`
	Dst string `json:"dst"`
	// From is the sending pod (--from), when given.
	From    string          `json:"from,omitempty"`
	Flow    string          `json:"flow"`
	Allowed bool            `json:"allowed"`
	Egress  policy.Decision `json:"egress"`
	Ingress policy.Decision `json:"ingress"`
	Kernel  []KernelCheck   `json:"kernel,omitempty"`
	// Counters says why the kernel was not checked.
	Counters string `json:"counters,omitempty"`
	// Staged is what each staged policy that concerns the flow would
	// decide if it were enforced (policy.Calc.ExplainStaged); StagedNotes
	// what could not be carried into that evaluation exactly.
	Staged      []policy.StagedVerdict `json:"staged,omitempty"`
	StagedNotes []string               `json:"stagedNotes,omitempty"`
	// StagedTogether is the flow's fate with every staged policy
	// enforced at once (policy.Calc.ExplainStagedTogether).
	StagedTogether *policy.StagedVerdict `json:"stagedTogether,omitempty"`
	// HostEndpointWarnings are the flow's host endpoints that are not
	// enforced as written (hostendpoint_warn.go).
	HostEndpointWarnings []policy.HostEndpointWarning `json:"hostEndpointWarnings,omitempty"`
}

// KernelCheck is one direction's rule counter on the node that serves
// the status socket.
type KernelCheck struct {
	Direction string     `json:"direction"`
	Node      string     `json:"node"`
	Rule      string     `json:"rule"`
	Packets   uint64     `json:"packets"`
	LastHit   *time.Time `json:"lastHit,omitempty"`
	// Agrees: the counter has counted packets.
	Agrees bool `json:"agrees"`
}

// explainQuery is what "policy explain" is asked: its arguments and
// flags.
type explainQuery struct {
	src, dst, proto string
	srcPort         int
	// from is --from: the sending pod, SRC then an address.
	from string
}

func explain(ctx context.Context, out io.Writer, ds *datastore.Client, st *status.Client, q explainQuery, asJSON bool) error {
	src, dst, proto, srcPort := q.src, q.dst, q.proto, q.srcPort
	if ctx == nil {
		ctx = context.Background()
	}
	m := policy.NewModel()
	// Warnings about the model go beside JSON output, not into it.
	warn := out
	if asJSON {
		warn = os.Stderr
	}
	var weps []*api.WorkloadEndpoint
	for _, k := range explainKinds {
		rs, corrupt, _, err := ds.ListWithCorrupt(ctx, k)
		if err != nil {
			return err
		}
		for _, cr := range corrupt {
			if k == api.KindHostEndpoint {
				fmt.Fprintf(warn, "warning: %s %s does not decode, or names another object, and is left out of this explanation; felix denies its interface's traffic on its node (every host endpoint's, of every node, when it cannot read which), the failsafe ports excepted (routedctl policy unreadable): %v\n", k, cr.Name, cr.Err)
				continue
			}
			if k == api.KindWorkloadEndpoint {
				addrs := policy.SalvageEndpointAddrs(cr.Value)
				if err := m.SetUnreadableEndpoint(cr.Name, nil, addrs, cr.Err); err != nil {
					fmt.Fprintf(warn, "warning: %s %s does not decode, or names another object, and no deny stands for it: %v\n", k, cr.Name, err)
					continue
				}
				fmt.Fprintf(warn, "warning: %s %s does not decode, or names another object (%v): felix drops its pod's traffic on its node and denies the traffic from and to its addresses %v at every pod (with those of the version it had before; routedctl policy unreadable)\n", k, cr.Name, cr.Err, addrs)
				continue
			}
			if !slices.Contains(policy.UnreadableKinds, k) {
				fmt.Fprintf(warn, "warning: %s %s does not decode, or names another object, and is left out of this explanation (felix skips one that does not decode and takes a misnamed one as written): %v\n", k, cr.Name, cr.Err)
				continue
			}
			if err := m.SetUnreadable(k, cr.Name, cr.Err); err != nil {
				fmt.Fprintf(warn, "warning: %s %s does not decode, and no deny stands for it: %v\n", k, cr.Name, err)
				continue
			}
			fmt.Fprintf(warn, "warning: %s %s does not decode (%v): felix denies the traffic it could decide (routedctl policy unreadable)\n", k, cr.Name, cr.Err)
		}
		for _, r := range rs {
			if w, ok := r.(*api.WorkloadEndpoint); ok {
				weps = append(weps, w)
			}
			if err := setModel(m, r); err != nil {
				if w, ok := r.(*api.WorkloadEndpoint); ok {
					// As felix: denied for, as unreadable.
					addrs := policy.RefusedEndpointAddrs(w)
					if err := m.SetUnreadableEndpoint(api.StoreName(w), nil, addrs, fmt.Errorf("refused: %w", err)); err != nil {
						fmt.Fprintf(warn, "warning: %s %s is refused, and no deny stands for it: %v\n", r.GetKind(), api.StoreName(r), err)
						continue
					}
					fmt.Fprintf(warn, "warning: %s %s is refused (%v): felix drops its pod's traffic on its node and denies the traffic from and to its addresses %v at every pod (with those of the version it had before; routedctl policy unreadable)\n", r.GetKind(), api.StoreName(r), err, addrs)
					continue
				}
				fmt.Fprintf(warn, "warning: %s %s not taken as written, as felix does not take it: %v\n", r.GetKind(), api.StoreName(r), err)
			}
		}
	}
	if err := explainEncapPorts(ctx, m, ds); err != nil {
		return err
	}
	sa, sv4, sv6, err := resolveRef(weps, src)
	if err != nil {
		return err
	}
	var fromKey string
	if q.from != "" {
		if !sa.IsValid() {
			return usageError("with --from, SRC must be an address (the packet's source), not %q", src)
		}
		if fromKey, err = resolveSender(weps, q.from); err != nil {
			return err
		}
	}
	da, dv4, dv6, err := resolveRef(weps, dst)
	if err != nil {
		return err
	}
	// Pick one family both ends have.
	switch {
	case sa.IsValid() && da.IsValid():
	case sa.IsValid():
		da = pickFamily(sa.Is4(), dv4, dv6)
	case da.IsValid():
		sa = pickFamily(da.Is4(), sv4, sv6)
	case sv4.IsValid() && dv4.IsValid():
		sa, da = sv4, dv4
	default:
		sa, da = sv6, dv6
	}
	if !sa.IsValid() || !da.IsValid() || sa.Is4() != da.Is4() {
		return fmt.Errorf("%s and %s have no addresses of one family", src, dst)
	}
	f, err := parseFlow(proto, sa.Is6())
	if err != nil {
		return err
	}
	f.Src, f.Dst, f.SrcPort, f.From = sa, da, uint16(srcPort), fromKey
	x := m.Explain(f)
	res := ExplainResult{Src: src, Dst: dst, From: q.from, Flow: flowString(f), Allowed: x.Allowed(), Egress: x.Egress, Ingress: x.Ingress,
		HostEndpointWarnings: flowHostWarnings(m, x)}
	staged, notes, err := stagedPolicies(ctx, ds)
	if err != nil {
		return err
	}
	if res.Staged, err = m.ExplainStaged(f, x, staged); err != nil {
		return err
	}
	if res.StagedTogether, err = m.ExplainStagedTogether(f, x, staged); err != nil {
		return err
	}
	res.StagedNotes = notes
	res.Kernel, res.Counters = kernelChecks(ctx, st, x)
	if asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	printExplain(out, res)
	return nil
}

// resolveRef reads an explain argument: an address, a WorkloadEndpoint
// name, or NAMESPACE/POD. For a workload it returns its first IPv4 and
// IPv6 address; for an address, that address.
func resolveRef(weps []*api.WorkloadEndpoint, ref string) (addr, v4, v6 netip.Addr, err error) {
	if a, err := netip.ParseAddr(ref); err == nil {
		return a.Unmap(), netip.Addr{}, netip.Addr{}, nil
	}
	ns, pod, isPod := strings.Cut(ref, "/")
	for _, w := range weps {
		if w.Metadata.Name != ref && (!isPod || w.Spec.Namespace != ns || w.Spec.Pod != pod) {
			continue
		}
		for _, n := range w.Spec.IPNetworks {
			p, err := netip.ParsePrefix(n)
			if err != nil {
				continue
			}
			if a := p.Addr(); a.Is4() && !v4.IsValid() {
				v4 = a
			} else if a.Is6() && !v6.IsValid() {
				v6 = a
			}
		}
		return netip.Addr{}, v4, v6, nil
	}
	return addr, v4, v6, fmt.Errorf("%q is no address, WorkloadEndpoint name or NAMESPACE/POD of a WorkloadEndpoint", ref)
}

// resolveSender reads --from: a WorkloadEndpoint name or NAMESPACE/POD,
// giving the endpoint's key in the policy model (its name).
func resolveSender(weps []*api.WorkloadEndpoint, ref string) (string, error) {
	ns, pod, isPod := strings.Cut(ref, "/")
	for _, w := range weps {
		if w.Metadata.Name == ref || (isPod && w.Spec.Namespace == ns && w.Spec.Pod == pod) {
			return w.Metadata.Name, nil
		}
	}
	return "", fmt.Errorf("--from %q: no WorkloadEndpoint has that name or NAMESPACE/POD", ref)
}

func pickFamily(four bool, v4, v6 netip.Addr) netip.Addr {
	if four {
		return v4
	}
	return v6
}

// parseFlow reads PROTO[/PORT].
func parseFlow(s string, v6 bool) (policy.Flow, error) {
	f := policy.Flow{ICMPType: -1, ICMPCode: -1}
	name, port, hasPort := strings.Cut(strings.ToLower(s), "/")
	n := 0
	if hasPort {
		var err error
		if n, err = strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
			return f, usageError("%q: the port (or ICMP type) must be a number 0-65535", s)
		}
	}
	switch name {
	case "tcp":
		f.Proto = 6
	case "udp":
		f.Proto = 17
	case "sctp":
		f.Proto = 132
	case "icmp", "icmpv6":
		f.Proto, f.ICMPType, f.ICMPCode = 1, 8, 0
		if v6 {
			f.Proto, f.ICMPType = 58, 128
		}
		if hasPort {
			f.ICMPType = n
		}
		return f, nil
	default:
		return f, usageError("%q: PROTO must be tcp, udp, sctp, icmp or icmpv6", s)
	}
	f.DstPort = uint16(n)
	return f, nil
}

func flowString(f policy.Flow) string {
	p := map[uint8]string{1: "ICMP", 6: "TCP", 17: "UDP", 58: "ICMPv6", 132: "SCTP"}[f.Proto]
	if f.ICMPType >= 0 {
		return fmt.Sprintf("%s -> %s %s type %d code %d", f.Src, f.Dst, p, f.ICMPType, f.ICMPCode)
	}
	src := f.Src.String()
	if f.SrcPort != 0 {
		src = netip.AddrPortFrom(f.Src, f.SrcPort).String()
	}
	return fmt.Sprintf("%s -> %s %s", src, netip.AddrPortFrom(f.Dst, f.DstPort), p)
}

// kernelChecks compares each policed direction whose endpoint is on
// the status socket's node with that node's rule counters.
func kernelChecks(ctx context.Context, st *status.Client, x policy.Explanation) ([]KernelCheck, string) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	p, err := st.Process(ctx)
	if err != nil {
		if errors.Is(err, status.ErrNotRunning) {
			return nil, "not checked: no routed answers on the status socket here"
		}
		return nil, "not checked: " + err.Error()
	}
	var checks []KernelCheck
	var cs []status.PolicyCounter
	for _, d := range []policy.Decision{x.Egress, x.Ingress} {
		if !d.Policed || d.Node != p.NodeName {
			continue
		}
		if cs == nil {
			if cs, err = st.PolicyCounters(ctx); err != nil {
				return nil, "not checked: " + err.Error()
			}
		}
		kc := KernelCheck{Direction: d.Direction, Node: p.NodeName, Rule: d.Rule.ID}
		for _, c := range cs {
			if c.Rule == d.Rule.ID {
				kc.Packets, kc.LastHit, kc.Agrees = c.Packets, c.LastHit, c.Packets > 0
			}
		}
		checks = append(checks, kc)
	}
	if len(checks) == 0 {
		return nil, fmt.Sprintf("not checked: neither endpoint is on %s, the node whose status socket answered", p.NodeName)
	}
	return checks, ""
}

func printExplain(out io.Writer, r ExplainResult) {
	fmt.Fprintf(out, "flow: %s\n", r.Flow)
	if r.From != "" {
		fmt.Fprintf(out, "sent by: %s\n", r.From)
	}
	for _, d := range []policy.Decision{r.Egress, r.Ingress} {
		printDecision(out, "", d)
	}
	switch {
	case r.Egress.Rule.Kind == policy.KindSpoofedSource:
		fmt.Fprintln(out, "verdict: dropped: spoofed source")
	case r.Egress.Rule.Kind == policy.KindWorkloadEncap:
		fmt.Fprintln(out, "verdict: dropped: encapsulated (a pod's VXLAN)")
	case r.Allowed:
		fmt.Fprintln(out, "verdict: allowed")
	default:
		fmt.Fprintln(out, "verdict: denied")
	}
	for _, w := range r.HostEndpointWarnings {
		fmt.Fprintf(out, "warning: %s\n", w)
	}
	if r.Counters != "" {
		fmt.Fprintf(out, "kernel counters: %s\n", r.Counters)
	}
	for _, k := range r.Kernel {
		hit := ""
		if k.LastHit != nil {
			hit = fmt.Sprintf(", last hit %s ago", time.Since(*k.LastHit).Round(time.Second))
		}
		if k.Agrees {
			fmt.Fprintf(out, "kernel on %s: %s %s has counted %d packets%s: agrees\n", k.Node, k.Direction, k.Rule, k.Packets, hit)
		} else {
			fmt.Fprintf(out, "kernel on %s: %s %s has counted nothing: the flow was not tried since it was programmed, or the node's model differs\n", k.Node, k.Direction, k.Rule)
		}
	}
	printStaged(out, r)
}

// printDecision prints one direction's decision, each line after
// indent.
func printDecision(out io.Writer, indent string, d policy.Decision) {
	switch d.Rule.Kind {
	case policy.KindSpoofedSource:
		fmt.Fprintf(out, "%s%s of %s on %s: dropped: spoofed source: the source address is not the pod's, dropped before any policy [%s]\n", indent, d.Direction, d.Endpoint, d.Node, d.Rule.ID)
		return
	case policy.KindWorkloadEncap:
		fmt.Fprintf(out, "%s%s of %s on %s: dropped: UDP to a VXLAN port from a pod, dropped before any policy (the nodes' tunnels would unwrap it from any source) [%s]\n", indent, d.Direction, d.Endpoint, d.Node, d.Rule.ID)
		return
	case policy.KindNotReached, policy.KindUnknownSender:
		fmt.Fprintf(out, "%s%s: %s\n", indent, d.Direction, d.Rule.Kind)
		return
	}
	if d.Rule.Kind == policy.KindHostNotExplained {
		fmt.Fprintf(out, "%s%s: the address is host endpoint %s's on %s: host endpoint policy is not explained\n", indent, d.Direction, strings.TrimPrefix(d.Endpoint, "hep:"), d.Node)
		return
	}
	if !d.Policed {
		fmt.Fprintf(out, "%s%s: not policed (no workload has that address)\n", indent, d.Direction)
		return
	}
	verdict := "denied"
	if d.Allowed {
		verdict = "allowed"
	}
	fmt.Fprintf(out, "%s%s of %s on %s: %s by %s\n", indent, d.Direction, d.Endpoint, d.Node, verdict, describeRule(d.Rule))
	for _, p := range d.Passed {
		fmt.Fprintf(out, "%s  passed on by %s\n", indent, describeRule(p))
	}
	for _, l := range d.Logged {
		fmt.Fprintf(out, "%s  logged by %s\n", indent, describeRule(l))
	}
}

// describeRule names a rule for people.
func describeRule(r policy.RuleInfo) string {
	switch r.Kind {
	case policy.KindPolicyRule:
		return fmt.Sprintf("tier %s, policy %s, %s rule %d (%s) [%s]", r.Tier, r.Policy, r.Direction, r.Index, r.Action, r.ID)
	case policy.KindStagedPolicyRule:
		return fmt.Sprintf("tier %s, %s, %s rule %d (%s)", r.Tier, r.Policy, r.Direction, r.Index, r.Action)
	case policy.KindProfileRule:
		return fmt.Sprintf("profile %s, %s rule %d (%s) [%s]", r.Profile, r.Direction, r.Index, r.Action, r.ID)
	case policy.KindTierEnd:
		return fmt.Sprintf("the end of tier %s: no policy of it allowed or passed the flow [%s]", r.Tier, r.ID)
	case policy.KindNoProfile:
		return fmt.Sprintf("the end of the profiles: no policy or profile allowed the flow [%s]", r.ID)
	}
	return r.Kind
}

// explainEncapPorts tells the model the UDP ports felix drops from pods
// as VXLAN: the default port and the one FelixConfiguration "default"
// sets (felix keeps every port it has used since it started dropped:
// explain cannot know those).
func explainEncapPorts(ctx context.Context, m *policy.Calc, ds *datastore.Client) error {
	ports := []uint16{policy.DefaultVXLANPort}
	r, err := ds.Get(ctx, api.KindFelixConfiguration, "default")
	switch {
	case errors.Is(err, datastore.ErrNotFound):
	case err != nil:
		return err
	default:
		if fc, ok := r.(*api.FelixConfiguration); ok && fc.Spec.VXLANPort != nil {
			ports = append(ports, uint16(*fc.Spec.VXLANPort))
		}
	}
	m.SetWorkloadEncapPorts(ports)
	return nil
}
