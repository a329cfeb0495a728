// Package statuscli holds routedctl's status commands: "node status",
// "show protocols" and "show route", which read the local routed's status
// socket.
//
// Exit codes, for scripts and readiness probes:
//
//	0  routed runs (and, for node status, every configured BGP session is
//	   Established)
//	1  routed is not running, or the status could not be read
//	2  node status only: routed runs but at least one configured session
//	   is not Established, or it has not read its sessions yet
//	3  policy unreadable only: the node denies for at least one stored
//	   policy record that does not decode
package statuscli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/routed-net/routed/routed/status"
)

// Exit codes returned through ExitError.
const (
	ExitOK          = 0
	ExitNotRunning  = 1
	ExitSessionDown = 2
)

// ExitError carries a process exit code. routedctl's ExitCode finds it
// with errors.As. When Reported is set the command already told the user
// on stdout (e.g. "routed process is not running."), so the caller should
// not print the error again: check for Silent() with errors.As.
type ExitError struct {
	Code     int
	Err      error
	Reported bool
}

// Silent reports whether the error was already shown to the user.
func (e *ExitError) Silent() bool { return e.Reported }

// Error returns the cause's message.
func (e *ExitError) Error() string { return e.Err.Error() }

// Unwrap returns the cause.
func (e *ExitError) Unwrap() error { return e.Err }

// ExitCode implements routedctl's exit-code interface.
func (e *ExitError) ExitCode() int { return e.Code }

// NewCommands returns the "node" (with "status") and "show" (with
// "protocols" and "route") commands, writing to out. Each carries a
// --status-socket flag defaulting to $ROUTED_STATUS_SOCKET or
// /var/run/routed/routed.sock.
func NewCommands(out io.Writer) []*cobra.Command {
	var sock string
	client := func() *status.Client { return status.NewClient(status.SocketPath(sock)) }

	node := &cobra.Command{Use: "node", Short: "Node-level status of the local routed"}
	node.AddCommand(&cobra.Command{
		Use:   "status",
		Short: "Show whether routed runs and the state of its BGP sessions",
		Long: `Prints "routed process is running." and a table of BGP sessions for
IPv4 then IPv6, like calicoctl node status. Exit code 0 when every
configured session (of either family) is Established, 2 when one is not
or while routed has not read its sessions from the datastore yet
(start-up), 1 when routed is not running.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return nodeStatus(cmd.Context(), out, client())
		},
	})

	node.AddCommand(rotateCommand(out, client))

	var profileOut string
	var profileFor time.Duration
	profile := &cobra.Command{
		Use:   "profile NAME",
		Short: "Write a Go runtime profile of the local routed (cpu, heap, goroutine, allocs...)",
		Long: `Writes the runtime/pprof profile NAME of the running routed (cpu, heap,
allocs, goroutine, threadcreate, block, mutex) in pprof's format, to -o
FILE or standard output; read it with ` + "`go tool pprof`" + `. For a question
about routed's memory, goroutines or CPU on a live node. "cpu" samples
the process for --for (10s by default, 5m at most); one CPU profile at a
time.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if args[0] != "cpu" && cmd.Flags().Changed("for") {
				return fmt.Errorf("--for applies to the cpu profile only, not %q", args[0])
			}
			w := out
			if profileOut != "" {
				f, err := os.Create(profileOut)
				if err != nil {
					return err
				}
				defer f.Close()
				w = f
			}
			ctx := ctxOrBackground(cmd.Context())
			var err error
			if args[0] == "cpu" {
				err = client().CPUProfile(ctx, profileFor, w)
			} else {
				err = client().Profile(ctx, args[0], w)
			}
			if err != nil {
				return notRunning(out, err)
			}
			return nil
		},
	}
	profile.Flags().StringVarP(&profileOut, "output", "o", "", "write the profile to FILE instead of standard output")
	profile.Flags().DurationVar(&profileFor, "for", status.DefaultCPUProfile, "how long the cpu profile samples (1s to 5m)")
	node.AddCommand(profile)

	show := &cobra.Command{Use: "show", Short: "Show BGP protocols and routes (like birdc)"}
	show.AddCommand(&cobra.Command{
		Use:   "protocols",
		Short: "List BGP sessions with state, info and counters",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return showProtocols(cmd.Context(), out, client())
		},
	}, &cobra.Command{
		Use:   "route [PREFIX|ADDRESS]",
		Short: "List the BGP RIB: prefix, next hop, peer, age and whether felix programmed it",
		Long: `Without an argument lists every path, IPv4 then IPv6. A PREFIX
(10.65.0.0/26, fd00:10:244::40/122) shows that prefix only; an ADDRESS
(10.65.0.7, fd00:10:244::47) shows the prefixes that contain it.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			filter := ""
			if len(args) == 1 {
				filter = args[0]
			}
			return showRoute(cmd.Context(), out, client(), filter)
		},
	})
	policy := &cobra.Command{Use: "policy", Short: "Network policy on the local node"}
	policy.AddCommand(&cobra.Command{
		Use:   "counters [SUBSTRING]",
		Short: "Packets and bytes per policy rule, as the kernel counts them on this node",
		Long: `Lists every rule felix programmed with its kernel counters: policy and
profile rules as <chain>/<index> (pi-/po-<policy>, pri-/pro-<profile>),
the default drops of the chains that endpoints with the same policies
share as ep-in-/ep-eg-<hash>/tier-end/<tier> and .../no-profile-allowed,
packets from or to interfaces felix has not programmed as
unknown-iface/<direction>, packets from pods whose source address is
not theirs as spoofed-src/egress and spoofed-src/to-host, and IPIP or
VXLAN packets pods send as wl-encap/egress and wl-encap/to-host, and
IPIP or VXLAN packets to the node from a source that is no node's (nor
in externalNodesList) as encap-src/not-node. A SUBSTRING keeps the rules whose ID contains it.

LAST HIT is how long ago felix first saw the counter grow. felix reads
the counters every 10 s and whenever asked, so the rule matched at most
one such interval before; "before watch" means it already had packets
when felix started (a restarted routed keeps the tables and counters).`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			filter := ""
			if len(args) == 1 {
				filter = args[0]
			}
			return policyCounters(cmd.Context(), out, client(), filter)
		},
	})
	policy.AddCommand(&cobra.Command{
		Use:   "unreadable",
		Short: "Stored policy records this node cannot decode, and whose traffic it denies for them",
		Long: `Lists the records of policy kinds (Tier, NetworkPolicy, GlobalNetworkPolicy,
Profile, NetworkSet, GlobalNetworkSet, ServiceEndpoints) that the
datastore holds but that do not decode (corrupt, or written by something
other than routed), or that felix refused with nothing of them in force.
What such a record says is unknown, so felix fails closed: until the
record is fixed or deleted, a deny in the tier routed:unreadable, before
every other tier, drops all traffic to and from the workload endpoints of
the record's namespace (a NetworkPolicy) or of every workload endpoint
and of this node's host endpoints (the other kinds; the failsafe ports
stay open). HostEndpoint records are listed too, with the interface
whose traffic is denied, and WorkloadEndpoint records: their pod's
interface drops on its node, and the traffic from and to the addresses
read from the record, or known from its previous version, is denied at
every workload endpoint. Fix the record by writing it again (routedctl
apply) or deleting it (routedctl delete): both work on a record that does
not decode. Exit code 3 when there is at least one.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return policyUnreadable(cmd.Context(), out, client())
		},
	})
	var follow bool
	var tail int
	var output string
	logCmd := &cobra.Command{
		Use:   "log",
		Short: "Packets the policy Log action (and, if enabled, drops) logged on this node",
		Long: `Prints the packets felix logged through nflog: those a rule with action Log
matched (verdict log: the packet goes on to the next rule) and, when routed
runs with --policy-log-drops, those dropped because no rule allowed them
(verdict drop). Each line has the time, verdict, direction, the endpoint
(namespace/pod) whose rule it is, source and destination with ports,
protocol, and the tier, policy (or profile) and rule index. A packet a pod
sent from an address that is not its own is dropped before any policy:
its line says "spoofed source: the source address is not the pod's", with
direction egress (forwarded) or to-host and the sending pod.

The kernel limits each logging rule to --policy-log-rate packets a second
and routed keeps the last 2048 records. -f follows new records as they
come; --tail N starts with the last N; -o json prints one JSON record a
line.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "" && output != "json" {
				return &ExitError{Code: ExitNotRunning, Err: fmt.Errorf("usage: -o must be json or empty, not %q", output)}
			}
			return policyLog(cmd.Context(), out, client(), tail, follow, output == "json")
		},
	}
	logCmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new records until interrupted")
	logCmd.Flags().IntVar(&tail, "tail", 0, "start with the last N records (0: all kept)")
	logCmd.Flags().StringVarP(&output, "output", "o", "", "json: one JSON record a line")
	policy.AddCommand(logCmd)
	for _, c := range []*cobra.Command{node, show, policy} {
		c.PersistentFlags().StringVar(&sock, "status-socket", "",
			"routed's status socket (default $"+status.EnvSocket+" or "+status.DefaultSocketPath+")")
	}
	return []*cobra.Command{node, show, policy}
}

func ctxOrBackground(ctx context.Context) context.Context {
	if ctx == nil {
		return context.Background()
	}
	return ctx
}

// notRunning prints the calicoctl-style line and returns exit code 1.
func notRunning(out io.Writer, err error) error {
	if errors.Is(err, status.ErrNotRunning) {
		fmt.Fprintln(out, "routed process is not running.")
		return &ExitError{Code: ExitNotRunning, Err: err, Reported: true}
	}
	return &ExitError{Code: ExitNotRunning, Err: err}
}

func nodeStatus(ctx context.Context, out io.Writer, c *status.Client) error {
	ctx = ctxOrBackground(ctx)
	// Asked before the sessions: once read they stay read, so a list
	// fetched after a "not pending" answer is complete.
	proc, err := c.Process(ctx)
	if err != nil {
		return notRunning(out, err)
	}
	peers, err := c.Peers(ctx)
	if err != nil {
		return notRunning(out, err)
	}
	fmt.Fprintln(out, "routed process is running.")
	var v4, v6 []status.Peer
	for _, p := range peers {
		if a, err := netip.ParseAddr(p.Address); err == nil && a.Unmap().Is6() {
			v6 = append(v6, p)
		} else {
			v4 = append(v4, p)
		}
	}
	peerTable(out, "IPv4", v4)
	peerTable(out, "IPv6", v6)
	if err := wireguardSection(ctx, out, c); err != nil {
		fmt.Fprintf(out, "\nWireGuard status unavailable: %v\n", err)
	}
	fmt.Fprintln(out)
	if proc.PeersPending && proc.ConfigProblem != "" {
		fmt.Fprintf(out, "BGP sessions not configured: %s.\n", proc.ConfigProblem)
		return &ExitError{Code: ExitSessionDown, Err: fmt.Errorf("BGP sessions not configured: %s", proc.ConfigProblem), Reported: true}
	}
	if proc.PeersPending {
		fmt.Fprintln(out, "BGP sessions not configured yet: routed has not read them from the datastore.")
		return &ExitError{Code: ExitSessionDown, Err: errors.New("BGP sessions not configured yet"), Reported: true}
	}
	down := 0
	for _, p := range peers {
		if !p.Established() {
			down++
		}
	}
	if down > 0 {
		return &ExitError{Code: ExitSessionDown, Err: fmt.Errorf("%d of %d BGP sessions not established", down, len(peers)), Reported: true}
	}
	return nil
}

// peerTable prints one family's sessions as calicoctl does, or "No
// IPv6 peers found." when there are none.
func peerTable(out io.Writer, family string, peers []status.Peer) {
	fmt.Fprintln(out)
	fmt.Fprintf(out, "%s BGP status\n", family)
	if len(peers) == 0 {
		fmt.Fprintf(out, "No %s peers found.\n", family)
		return
	}
	t := table{header: []string{"PEER ADDRESS", "PEER TYPE", "STATE", "SINCE", "INFO"}}
	for _, p := range peers {
		t.add(p.Address, p.Type, p.State, since(p.Since, clock()), p.Info)
	}
	t.write(out)
}

func showProtocols(ctx context.Context, out io.Writer, c *status.Client) error {
	ctx = ctxOrBackground(ctx)
	peers, err := c.Peers(ctx)
	if err != nil {
		return notRunning(out, err)
	}
	t := table{plain: true, header: []string{"Name", "Proto", "State", "Since", "Info"}}
	for _, p := range peers {
		t.add(protoName(p), "BGP", p.State, since(p.Since, clock()), p.Info)
	}
	t.write(out)
	if len(peers) > 0 {
		fmt.Fprintln(out)
	}
	for _, p := range peers {
		fmt.Fprintf(out, "%s:\n", protoName(p))
		fmt.Fprintf(out, "  Neighbor address: %s\n", p.Address)
		fmt.Fprintf(out, "  Peer type:        %s\n", p.Type)
		fmt.Fprintf(out, "  Neighbor AS:      %d\n", p.PeerASN)
		fmt.Fprintf(out, "  Local AS:         %d\n", p.LocalASN)
		if p.RouterID != "" && p.RouterID != "<nil>" {
			fmt.Fprintf(out, "  Neighbor ID:      %s\n", p.RouterID)
		}
		fmt.Fprintf(out, "  BGP state:        %s\n", p.BGPState)
		fmt.Fprintf(out, "  Routes:           %d received, %d accepted, %d advertised\n", p.Received, p.Accepted, p.Advertised)
		fmt.Fprintf(out, "  Messages:         %d sent, %d received (updates %d sent, %d received)\n",
			p.MessagesSent, p.MessagesReceived, p.UpdatesSent, p.UpdatesReceived)
	}
	return nil
}

// protoName names a session the way Calico's BIRD config does:
// Mesh_10_0_0_2, Node_10_0_0_9 or Global_10_0_0_9 (Mesh_fd00__2 for
// IPv6).
func protoName(p status.Peer) string {
	prefix := "Global_"
	switch p.Type {
	case "node-to-node mesh":
		prefix = "Mesh_"
	case "node specific":
		prefix = "Node_"
	case "route reflector":
		prefix = "RR_"
	}
	b := []byte(p.Address)
	for i, c := range b {
		if c == '.' || c == ':' {
			b[i] = '_'
		}
	}
	return prefix + string(b)
}

func showRoute(ctx context.Context, out io.Writer, c *status.Client, filter string) error {
	ctx = ctxOrBackground(ctx)
	match, err := routeFilter(filter)
	if err != nil {
		return &ExitError{Code: ExitNotRunning, Err: err}
	}
	routes, err := c.Routes(ctx)
	if err != nil {
		return notRunning(out, err)
	}
	t := table{plain: true, header: []string{"Prefix", "Next hop", "Peer", "Best", "Age", "Programmed"}}
	now := clock()
	for _, r := range routes {
		if !match(r.Prefix) {
			continue
		}
		peer := r.Peer
		if r.Local {
			peer = "local"
		}
		best := ""
		if r.Best {
			best = "*"
		}
		prog := "-"
		if r.Programmed != nil {
			prog = "no"
			if *r.Programmed {
				prog = "yes"
			}
		}
		if r.Filtered != "" {
			prog = "filtered: " + r.Filtered
		}
		t.add(r.Prefix, r.NextHop, peer, best, age(r.Since, now), prog)
	}
	t.write(out)
	return nil
}

// routeFilter parses show route's argument: a prefix matches itself, an
// address matches every prefix containing it.
func routeFilter(arg string) (func(string) bool, error) {
	if arg == "" {
		return func(string) bool { return true }, nil
	}
	if p, err := netip.ParsePrefix(arg); err == nil {
		p = p.Masked()
		return func(s string) bool {
			q, err := netip.ParsePrefix(s)
			return err == nil && q.Masked() == p
		}, nil
	}
	if a, err := netip.ParseAddr(arg); err == nil {
		return func(s string) bool {
			q, err := netip.ParsePrefix(s)
			return err == nil && q.Contains(a)
		}, nil
	}
	return nil, fmt.Errorf("usage: %q is neither a prefix (10.65.0.0/26) nor an address", arg)
}

func policyCounters(ctx context.Context, out io.Writer, c *status.Client, filter string) error {
	cs, err := c.PolicyCounters(ctxOrBackground(ctx))
	if err != nil {
		return notRunning(out, err)
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RULE\tPACKETS\tBYTES\tLAST HIT")
	now := clock()
	for _, p := range cs {
		if filter != "" && !strings.Contains(p.Rule, filter) {
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\n", p.Rule, p.Packets, p.Bytes, lastHit(p, now))
	}
	return tw.Flush()
}

// ExitUnreadable is policy unreadable's exit code when the node denies
// for at least one unreadable record.
const ExitUnreadable = 3

func policyUnreadable(ctx context.Context, out io.Writer, c *status.Client) error {
	rs, err := c.PolicyUnreadable(ctxOrBackground(ctx))
	if err != nil {
		return notRunning(out, err)
	}
	if len(rs) == 0 {
		fmt.Fprintln(out, "No unreadable policy records.")
		return nil
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KIND\tNAME\tDENIED\tKEY\tERROR")
	for _, r := range rs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Kind, r.Name, r.Scope, r.Key, r.Error)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return &ExitError{Code: ExitUnreadable, Err: fmt.Errorf("%d unreadable policy records: their traffic is denied", len(rs)), Reported: true}
}

// lastHit formats when a rule last matched: "12s ago", "before 5m" when
// it had packets before felix started watching, "-" for never seen.
func lastHit(p status.PolicyCounter, now time.Time) string {
	switch {
	case p.LastHit != nil:
		return age(*p.LastHit, now) + " ago"
	case p.HitBefore:
		return "before watch"
	}
	return "-"
}

func policyLog(ctx context.Context, out io.Writer, c *status.Client, tail int, follow, asJSON bool) error {
	enc := json.NewEncoder(out)
	err := c.PolicyLog(ctxOrBackground(ctx), 0, tail, follow, func(r status.PolicyLogRecord) error {
		if asJSON {
			return enc.Encode(r)
		}
		_, err := fmt.Fprintln(out, FormatLogRecord(r))
		return err
	})
	if err != nil {
		return notRunning(out, err)
	}
	return nil
}

// FormatLogRecord renders one policy log record as a line:
//
//	12:01:02.345 drop ingress prod/web-1 10.65.0.1:43210 -> 10.65.0.2:9090 TCP tier default policy gnp:deny-db rule 0 (Deny)
func FormatLogRecord(r status.PolicyLogRecord) string {
	ep := r.Endpoint
	if r.Pod != "" {
		ep = r.Namespace + "/" + r.Pod
	}
	if ep == "" {
		ep = r.Iface
	}
	if ep == "" {
		ep = "-"
	}
	ends := fmt.Sprintf("%s -> %s", hostPort(r.Src, r.SrcPort), hostPort(r.Dst, r.DstPort))
	proto := r.Proto
	if r.ICMPType != nil {
		proto = fmt.Sprintf("%s type %d code %d", proto, *r.ICMPType, *r.ICMPCode)
	}
	var rule string
	switch {
	case r.Prefix != "":
		rule = fmt.Sprintf("unknown rule (prefix %q)", r.Prefix)
	case r.Policy != "":
		rule = fmt.Sprintf("tier %s policy %s rule %d (%s)", r.Tier, r.Policy, r.Rule, r.Action)
	case r.Profile != "":
		rule = fmt.Sprintf("profile %s rule %d (%s)", r.Profile, r.Rule, r.Action)
	case r.Tier != "":
		rule = fmt.Sprintf("tier %s: %s", r.Tier, r.Kind)
	default:
		rule = r.Kind
	}
	return fmt.Sprintf("%s %s %s %s %s %s %s", r.Time.Local().Format("15:04:05.000"), r.Verdict, r.Direction, ep, ends, proto, rule)
}

func hostPort(addr string, port uint16) string {
	if port == 0 {
		return addr
	}
	return net.JoinHostPort(addr, strconv.Itoa(int(port)))
}
