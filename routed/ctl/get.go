package ctl

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/routed-net/routed/felix/policy"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
)

func newGetCmd(g *globals) *cobra.Command {
	var output, namespace string
	cmd := &cobra.Command{
		Use:   "get KIND [NAME...]",
		Short: "Show resources as a table, YAML or JSON",
		Long: `Show resources. KIND is one of ippool, node, bgpconfiguration, bgppeer,
bgpfilter, workloadendpoint (wep), ipamconfiguration, tier, networkpolicy,
globalnetworkpolicy (gnp), profile, networkset, globalnetworkset (singular or
plural). NetworkPolicies and NetworkSets are named NAMESPACE/NAME or -n
NAMESPACE NAME; WorkloadEndpoints NAMESPACE/POD as the table prints them
(every interface of the pod), -n NAMESPACE POD, or their datastore name.
-o yaml and -o json print resources that "apply -f" reads back.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			k, err := api.ParseKind(args[0])
			if err != nil {
				return err
			}
			if output != "" && output != "wide" && output != "yaml" && output != "json" {
				return usageError("-o must be yaml, json or wide, not %q", output)
			}
			c, err := g.connect()
			if err != nil {
				return err
			}
			defer c.Close()
			var rs []api.Resource
			var corrupt []datastore.CorruptRecord
			defer func() { printCorrupt(g.errOut, k, namespace, corrupt) }()
			if len(args) > 1 {
				for _, name := range args[1:] {
					if k == api.KindWorkloadEndpoint && isWorkloadRef(namespace, name) {
						ws, err := workloadEndpoints(cmd.Context(), c, namespace, name)
						if err != nil {
							return err
						}
						rs = append(rs, ws...)
						continue
					}
					sn, err := storeName(k, namespace, name)
					if err != nil {
						return err
					}
					r, err := c.Get(cmd.Context(), k, sn)
					var ce *datastore.CorruptError
					if errors.As(err, &ce) {
						return fmt.Errorf("%s %s does not decode: %v (%s)", k, sn, ce.Err, corruptHint(k))
					}
					if err != nil {
						return err
					}
					rs = append(rs, r)
				}
			} else if rs, corrupt, _, err = c.ListWithCorrupt(cmd.Context(), k); err != nil {
				return err
			} else if namespace != "" && k == api.KindWorkloadEndpoint {
				rs = inWorkloadNamespace(rs, namespace)
			} else if namespace != "" {
				rs = inNamespace(rs, namespace)
			}
			switch output {
			case "yaml", "json":
				return api.Encode(g.out, rs, output, len(args) == 1)
			}
			if err := printTable(g.out, k, rs, output == "wide"); err != nil || k != api.KindHostEndpoint || len(args) > 1 {
				return err
			}
			return printHostEndpointWarnings(cmd.Context(), g.errOut, c, rs)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: yaml, json or wide (default: table)")
	cmd.Flags().StringVarP(&namespace, "namespace", "n", "", "only this namespace's NetworkPolicies, NetworkSets and pods' WorkloadEndpoints (names may also be written NAMESPACE/NAME)")
	return cmd
}

// printCorrupt warns of the listed records of kind k (in namespace, for
// a namespaced kind) that do not decode: a table or a file without them
// would say they do not exist.
func printCorrupt(out io.Writer, k api.Kind, namespace string, corrupt []datastore.CorruptRecord) {
	for _, cr := range corrupt {
		if namespace != "" && k.Namespaced() && !strings.HasPrefix(cr.Name, namespace+".") {
			continue
		}
		fmt.Fprintf(out, "warning: %s %s (key %s) does not decode and is not listed: %v (%s)\n",
			k, cr.Name, datastore.Key(k, cr.Name), cr.Err.Err, corruptHint(k))
	}
}

// corruptHint says what a record that does not decode does and how it
// is fixed.
func corruptHint(k api.Kind) string {
	fix := "write it again with routedctl apply, or routedctl delete it"
	if slices.Contains(policy.UnreadableKinds, k) {
		return "felix denies the traffic it could decide until it is fixed: routedctl policy unreadable; " + fix
	}
	if k == api.KindHostEndpoint {
		return "felix denies its interface's traffic on its node (every host endpoint's when it cannot read which, on every node when it cannot read its node), the failsafe ports excepted, until it is fixed: routedctl policy unreadable; " + fix
	}
	return fix
}

// printTable prints resources the way calicoctl does: a few key columns,
// more with wide.
func printTable(out io.Writer, k api.Kind, rs []api.Resource, wide bool) error {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	head, row := columns(k, wide)
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	for _, r := range rs {
		fmt.Fprintln(tw, strings.Join(row(r), "\t"))
	}
	return tw.Flush()
}

func columns(k api.Kind, wide bool) ([]string, func(api.Resource) []string) {
	switch k {
	case api.KindIPPool:
		return pick(wide, []string{"NAME", "CIDR", "SELECTOR"}, []string{"BLOCKSIZE", "IPIPMODE", "VXLANMODE", "NATOUTGOING", "DISABLED"}),
			func(r api.Resource) []string {
				p := r.(*api.IPPool)
				return pick(wide, []string{p.Metadata.Name, p.Spec.CIDR, p.Spec.NodeSelector},
					[]string{strconv.Itoa(p.Spec.BlockSize), p.Spec.IPIPMode, p.Spec.VXLANMode, strconv.FormatBool(p.Spec.NATOutgoing), strconv.FormatBool(p.Spec.Disabled)})
			}
	case api.KindNode:
		return pick(wide, []string{"NAME"}, []string{"ASN", "IPV4", "RRCLUSTERID", "TUNNELADDR", "VXLANADDR", "VXLANMAC"}),
			func(r api.Resource) []string {
				n := r.(*api.Node)
				b := n.Spec.BGP
				if b == nil {
					b = &api.NodeBGPSpec{}
				}
				return pick(wide, []string{n.Metadata.Name}, []string{asn(b.ASNumber), dash(b.IPv4Address), dash(b.RouteReflectorClusterID), dash(b.IPv4IPIPTunnelAddr), dash(n.Spec.IPv4VXLANTunnelAddr), dash(n.Spec.VXLANTunnelMACAddr)})
			}
	case api.KindBGPPeer:
		return pick(wide, []string{"NAME", "PEERIP", "NODE", "ASN"}, []string{"PEERSELECTOR", "PASSWORD"}),
			func(r api.Resource) []string {
				p := r.(*api.BGPPeer)
				node := p.Spec.Node
				if node == "" {
					node = p.Spec.NodeSelector
				}
				if node == "" {
					node = "(global)"
				}
				pw := "-"
				if p.Spec.Password != nil {
					pw = "set"
				}
				return pick(wide, []string{p.Metadata.Name, dash(p.Spec.PeerIP), node, asn(p.Spec.ASNumber)}, []string{dash(p.Spec.PeerSelector), pw})
			}
	case api.KindBGPConfiguration:
		return []string{"NAME", "LOGSEVERITY", "MESHENABLED", "ASNUMBER"},
			func(r api.Resource) []string {
				c := r.(*api.BGPConfiguration)
				return []string{c.Metadata.Name, dash(c.Spec.LogSeverity), strconv.FormatBool(c.MeshEnabled()), asn(c.Spec.ASNumber)}
			}
	case api.KindBGPFilter:
		return []string{"NAME", "IMPORTV4", "EXPORTV4"},
			func(r api.Resource) []string {
				f := r.(*api.BGPFilter)
				return []string{f.Metadata.Name, strconv.Itoa(len(f.Spec.ImportV4)) + " rules", strconv.Itoa(len(f.Spec.ExportV4)) + " rules"}
			}
	case api.KindWorkloadEndpoint:
		return pick(wide, []string{"WORKLOAD", "NODE", "NETWORKS", "INTERFACE"}, []string{"CONTAINER", "MAC"}),
			func(r api.Resource) []string {
				w := r.(*api.WorkloadEndpoint)
				wl := w.Spec.Pod
				if w.Spec.Namespace != "" {
					wl = w.Spec.Namespace + "/" + wl
				}
				return pick(wide, []string{dash(wl), w.Spec.Node, strings.Join(w.Spec.IPNetworks, ","), w.Spec.InterfaceName}, []string{w.Spec.ContainerID, dash(w.Spec.MAC)})
			}
	}
	if head, row, ok := hostEndpointColumns(k, wide); ok {
		return head, row
	}
	if head, row, ok := serviceEndpointsColumns(k, wide); ok {
		return head, row
	}
	if head, row, ok := policyColumns(k, wide); ok {
		return head, row
	}
	return []string{"NAME", "STRICTAFFINITY", "MAXBLOCKSPERHOST", "AUTOALLOCATE"},
		func(r api.Resource) []string {
			c := r.(*api.IPAMConfiguration)
			return []string{c.Metadata.Name, strconv.FormatBool(c.Spec.StrictAffinity), strconv.Itoa(c.Spec.MaxBlocksPerHost), strconv.FormatBool(c.AutoAllocate())}
		}
}

func pick(wide bool, base, extra []string) []string {
	if wide {
		return append(base, extra...)
	}
	return base
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func asn(a api.ASNumber) string {
	if a == 0 {
		return "(inherited)"
	}
	return strconv.FormatUint(uint64(a), 10)
}
