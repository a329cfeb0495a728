// Package ipamcli implements `routedctl ipam`: show usage, look up an
// address, check for leaks, release an address by hand and garbage
// collect. routedctl adds the command returned by NewCommand.
package ipamcli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/pkg/ipam"
)

// DefaultGrace is how old an unused allocation must be before check
// reports it and gc frees it: longer than any CNI ADD takes between
// allocating and writing its endpoint.
const DefaultGrace = 10 * time.Minute

// commandTimeout bounds one CLI invocation; each datastore operation is
// bounded separately by the datastore client.
const commandTimeout = 2 * time.Minute

// NewCommand returns the `ipam` command. connect is called once per
// invocation, and the client it returns is closed afterwards; output goes
// to out.
func NewCommand(connect func() (*datastore.Client, error), out io.Writer, opts ...Option) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ipam",
		Short: "Inspect and repair IP address management",
		Long: `Inspect and repair routed's IP address management (IPAM).

Pools are carved into blocks that nodes claim; pods get addresses from
their node's blocks. These commands show usage, tell who holds an
address, find and free leaked addresses, and release an address by hand.`,
	}
	r := &runner{connect: connect, out: out}
	for _, o := range opts {
		o(r)
	}
	cmd.AddCommand(r.showCmd(), r.checkCmd(), r.releaseCmd(), r.gcCmd())
	return cmd
}

// NodeCheck compares what the local node runs with the datastore,
// prints what the datastore lacks, and returns how many problems it
// found. local says whether the user asked for it (--local-node); a
// NodeCheck may also run on its own judgement (a socket named in the
// environment) and does nothing otherwise.
type NodeCheck func(ctx context.Context, out io.Writer, local bool) (int, error)

// Option configures the ipam command.
type Option func(*runner)

// WithNodeCheck adds the local node's part to `ipam check`.
func WithNodeCheck(f NodeCheck) Option { return func(r *runner) { r.nodeCheck = f } }

type runner struct {
	connect   func() (*datastore.Client, error)
	out       io.Writer
	nodeCheck NodeCheck // nil: etcd only
}

// with connects, runs f with an IPAM client, and disconnects.
func (r *runner) with(cmd *cobra.Command, f func(ctx context.Context, ds *datastore.Client, c *ipam.Client) error) error {
	ds, err := r.connect()
	if err != nil {
		return err
	}
	defer ds.Close()
	ctx, cancel := context.WithTimeout(cmd.Context(), commandTimeout)
	defer cancel()
	return f(ctx, ds, ipam.New(ds))
}

func (r *runner) showCmd() *cobra.Command {
	var showBlocks bool
	var ip string
	cmd := &cobra.Command{
		Use:   "show [--show-blocks] [--ip ADDRESS]",
		Short: "Show address usage per pool (and per block), or who holds an address",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return r.with(cmd, func(ctx context.Context, _ *datastore.Client, c *ipam.Client) error {
				ctx = ipam.ReadOnly(ctx) // never moves an old layout under older nodes
				if ip != "" {
					addr, err := netip.ParseAddr(ip)
					if err != nil {
						return fmt.Errorf("--ip %q is not an IP address", ip)
					}
					return r.showIP(ctx, c, addr)
				}
				u, err := c.Usage(ctx)
				if err != nil {
					return err
				}
				r.printUsage(u, showBlocks)
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&showBlocks, "show-blocks", false, "also list every block with its node and usage")
	cmd.Flags().StringVar(&ip, "ip", "", "show who holds this address")
	return cmd
}

func (r *runner) printUsage(u *ipam.Usage, showBlocks bool) {
	tw := tabwriter.NewWriter(r.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "POOL\tCIDR\tSIZE\tIN USE\tFREE\tBORROWED")
	for _, p := range u.Pools {
		name := p.Name
		if p.Disabled {
			name += " (disabled)"
		}
		size, free := fmt.Sprint(p.Size), fmt.Sprint(p.Free)
		if p.SizeBits > 40 {
			// An IPv6 pool: 2^80 addresses do not print usefully.
			size, free = fmt.Sprintf("2^%d", p.SizeBits), fmt.Sprintf("~2^%d", p.SizeBits)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d (%s)\t%s\t%d\n", name, p.CIDR, size, p.InUse, percent(p.InUse, p.Size), free, p.Borrowed)
	}
	tw.Flush()
	if len(u.Pools) == 0 {
		fmt.Fprintln(r.out, "No IP pools.")
	}
	if !showBlocks {
		return
	}
	fmt.Fprintln(r.out)
	tw = tabwriter.NewWriter(r.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "BLOCK\tPOOL\tNODE\tSTATE\tIN USE\tFREE\tBORROWED")
	row := func(b ipam.BlockUsage, pool string) {
		state := b.State
		if state == "" {
			state = "(no affinity)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d/%d\t%d\t%d\n", b.CIDR, pool, b.Node, state, b.InUse, b.Size, b.Free, b.Borrowed)
	}
	for _, p := range u.Pools {
		for _, b := range p.Blocks {
			row(b, p.Name)
		}
	}
	for _, b := range u.Orphaned {
		row(b, "(no pool)")
	}
	tw.Flush()
}

func percent(n, of int) string {
	if of == 0 {
		return "0%"
	}
	return fmt.Sprintf("%.0f%%", 100*float64(n)/float64(of))
}

func (r *runner) showIP(ctx context.Context, c *ipam.Client, ip netip.Addr) error {
	a, err := c.IPInfo(ctx, ip)
	switch {
	case errors.Is(err, ipam.ErrNotInPool):
		fmt.Fprintf(r.out, "%s is not allocated (it is in no IP pool)\n", ip)
		return nil
	case errors.Is(err, ipam.ErrNotAllocated):
		fmt.Fprintf(r.out, "%s is not allocated\n", ip)
		return nil
	case err != nil:
		return err
	}
	tw := tabwriter.NewWriter(r.out, 0, 4, 1, ' ', 0)
	fmt.Fprintf(tw, "IP:\t%s\n", a.IP)
	fmt.Fprintf(tw, "Handle:\t%s\n", a.Handle)
	fmt.Fprintf(tw, "Type:\t%s\n", a.Type)
	if a.Type != ipam.TypeTunnel {
		fmt.Fprintf(tw, "Namespace:\t%s\n", orDash(a.Namespace))
		fmt.Fprintf(tw, "Pod:\t%s\n", orDash(a.Pod))
	}
	fmt.Fprintf(tw, "Node:\t%s\n", a.Node)
	block := fmt.Sprintf("%s (affine to %s", a.Block, a.BlockNode)
	if a.Borrowed() {
		block += "; borrowed"
	}
	fmt.Fprintf(tw, "Block:\t%s)\n", block)
	fmt.Fprintf(tw, "Allocated:\t%s (sequence %d)\n", a.AllocatedAt.UTC().Format(time.RFC3339), a.Seq)
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func (r *runner) checkCmd() *cobra.Command {
	grace := DefaultGrace
	var local bool
	cmd := &cobra.Command{
		Use:   "check [--grace 10m] [--local-node]",
		Short: "Report leaked addresses, blocks of deleted nodes and inconsistent IPAM records",
		Long: `Report leaked addresses, blocks of deleted nodes and inconsistent IPAM records.

Nothing is changed. Allocations younger than --grace are not reported:
a pod being created holds its address before its endpoint exists.

Besides leaks it finds what can give two pods one address: overlapping
blocks, blocks outside every pool, addresses named by two endpoints, and
endpoints whose address IPAM does not hold for them.

On a node, --local-node (or ROUTED_STATUS_SOCKET set) also asks the
node's routed which pods it runs and names those the datastore lacks:
after etcd was restored from a snapshot, the pods started after it
(their addresses are in use on the node but not allocated in etcd), and
the node's endpoints that etcd brought back but no longer run. ` + "`routedctl ipam reimport`" + `
on that node puts the datastore right.

Exit status: 0 when nothing was found, 1 when problems were found, 2
when the check could not run (for example etcd is unreachable).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var found int
			err := r.with(cmd, func(ctx context.Context, ds *datastore.Client, c *ipam.Client) error {
				rep, err := c.Check(ipam.ReadOnly(ctx), grace)
				if err != nil {
					return err
				}
				printCheck(r.out, rep, grace)
				found = rep.Problems()
				// Nodes hold still on a datastore without its identity
				// or marked not ready: say so here too.
				ci, err := ds.GetClusterInfo(ctx, 0)
				switch {
				case errors.Is(err, datastore.ErrNoClusterInfo):
					found++
					fmt.Fprintln(r.out, "\nDatastore: no cluster identity. If nodes ran on it, it was wiped or replaced: they hold their routes "+
						"until you restore etcd from a backup or accept it with `routedctl datastore reinit`.")
				case err != nil:
					return err
				case !ci.DatastoreReady:
					found++
					fmt.Fprintln(r.out, "\nDatastore: marked not ready; nodes hold their routes until `routedctl datastore set-ready true`.")
				}
				if r.nodeCheck != nil {
					n, err := r.nodeCheck(ctx, r.out, local)
					if err != nil {
						return err
					}
					found += n
				}
				return nil
			})
			switch {
			case err != nil:
				return &ExitError{Code: 2, Err: fmt.Errorf("ipam check could not run: %w", err)}
			case found > 0:
				return &ExitError{Code: 1, Err: fmt.Errorf("ipam check found %d problem(s)", found), Reported: true}
			}
			return nil
		},
	}
	cmd.Flags().DurationVar(&grace, "grace", DefaultGrace, "ignore allocations younger than this")
	if r.nodeCheck != nil {
		cmd.Flags().BoolVar(&local, "local-node", false, "also compare the pods the local routed runs (its status socket) with the datastore")
	}
	return cmd
}

func (r *runner) gcCmd() *cobra.Command {
	grace := DefaultGrace
	cmd := &cobra.Command{
		Use:   "gc [--grace 10m]",
		Short: "Free leaked addresses and remove stale blocks, affinities and handles",
		Long: `Free what "ipam check" reports: leaked addresses older than --grace,
handles that hold nothing, affinities without blocks, and blocks of deleted
nodes once they are empty. Every change is conditional on the state just
read, so it is safe to run while pods come and go.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return r.with(cmd, func(ctx context.Context, _ *datastore.Client, c *ipam.Client) error {
				rep, err := c.GC(ctx, grace)
				if err != nil {
					return err
				}
				printGC(r.out, rep)
				if len(rep.Errors) > 0 {
					return fmt.Errorf("ipam gc: %d step(s) failed; run it again", len(rep.Errors))
				}
				return nil
			})
		},
	}
	cmd.Flags().DurationVar(&grace, "grace", DefaultGrace, "leave allocations younger than this alone")
	return cmd
}

func (r *runner) releaseCmd() *cobra.Command {
	var ip string
	var force bool
	cmd := &cobra.Command{
		Use:   "release --ip ADDRESS [--force]",
		Short: "Release one address by hand",
		Long: `Release one address by hand.

It refuses an address that is still in use (a workload endpoint names its
handle or the address, or it is the tunnel address of an existing node)
unless --force is given.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			addr, err := netip.ParseAddr(ip)
			if err != nil {
				return fmt.Errorf("--ip %q is not an IP address", ip)
			}
			return r.with(cmd, func(ctx context.Context, ds *datastore.Client, c *ipam.Client) error {
				return r.release(ctx, ds, c, addr, force)
			})
		},
	}
	cmd.Flags().StringVar(&ip, "ip", "", "the address to release (required)")
	cmd.Flags().BoolVar(&force, "force", false, "release even if the address is still in use")
	_ = cmd.MarkFlagRequired("ip")
	return cmd
}

func (r *runner) release(ctx context.Context, ds *datastore.Client, c *ipam.Client, ip netip.Addr, force bool) error {
	a, err := c.IPInfo(ctx, ip)
	if errors.Is(err, ipam.ErrNotAllocated) || errors.Is(err, ipam.ErrNotInPool) {
		fmt.Fprintf(r.out, "%s is not allocated; nothing to release\n", ip)
		return nil
	}
	if err != nil {
		return err
	}
	if !force {
		if user, err := inUseBy(ctx, ds, a); err != nil {
			return err
		} else if user != "" {
			return fmt.Errorf("refusing to release %s (handle %q): %s; use --force to release it anyway", ip, a.Handle, user)
		}
	}
	// The sequence number makes this a no-op if the address was released
	// and handed out again since IPInfo read it.
	freed, err := c.ReleaseIPs(ctx, ipam.Release{IP: ip, Seq: a.Seq})
	if err != nil {
		return err
	}
	if len(freed) == 0 {
		fmt.Fprintf(r.out, "%s was released meanwhile; nothing to do\n", ip)
		return nil
	}
	fmt.Fprintf(r.out, "Released %s (handle %q)\n", ip, a.Handle)
	return nil
}

// inUseBy says what still uses an allocation, or "" if nothing does.
func inUseBy(ctx context.Context, ds *datastore.Client, a *ipam.Allocation) (string, error) {
	if a.Type == ipam.TypeTunnel {
		_, err := ds.Get(ctx, api.KindNode, a.Node)
		switch {
		case err == nil:
			return fmt.Sprintf("it is the tunnel address of node %q, which exists", a.Node), nil
		case datastore.IsNotFound(err):
			return "", nil
		default:
			return "", err
		}
	}
	weps, _, err := ds.List(ctx, api.KindWorkloadEndpoint)
	if err != nil {
		return "", err
	}
	for _, res := range weps {
		w := res.(*api.WorkloadEndpoint)
		uses := w.Spec.Handle == a.Handle
		for _, n := range w.Spec.IPNetworks {
			if p, err := netip.ParsePrefix(n); err == nil && p.Addr() == a.IP {
				uses = true
			}
		}
		if uses {
			return fmt.Sprintf("workload endpoint %q (pod %s/%s on %s) still uses it", w.Metadata.Name, w.Spec.Namespace, w.Spec.Pod, w.Spec.Node), nil
		}
	}
	return "", nil
}

// ExitError carries the exit status of a command; routedctl finds it with
// errors.As (ExitCode). Reported means the output already told the user.
type ExitError struct {
	Code     int
	Err      error
	Reported bool
}

func (e *ExitError) Error() string { return e.Err.Error() }

// Unwrap returns the cause.
func (e *ExitError) Unwrap() error { return e.Err }

// ExitCode is the process exit status.
func (e *ExitError) ExitCode() int { return e.Code }

// Silent reports whether the error was already shown to the user.
func (e *ExitError) Silent() bool { return e.Reported }
