package ipamcli

import (
	"fmt"
	"io"
	"net/netip"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/routed-net/routed/pkg/ipam"
)

// printCheck writes what Check found, one section per kind of problem.
func printCheck(out io.Writer, r *ipam.Report, grace time.Duration) {
	if r.Problems() == 0 {
		fmt.Fprintf(out, "No IPAM problems found (revision %d).\n", r.Revision)
	} else {
		fmt.Fprintf(out, "%d IPAM problem(s) found (revision %d):\n", r.Problems(), r.Revision)
	}
	if len(r.Leaks) > 0 {
		section(out, "Leaked addresses (older than %s)", grace)
		t := newTable(out, "IP", "HANDLE", "NODE", "POD", "BLOCK", "ALLOCATED", "REASON")
		for _, l := range r.Leaks {
			pod := "-"
			if l.Pod != "" {
				pod = l.Namespace + "/" + l.Pod
			}
			t.row(l.IP, l.Handle, l.Node, pod, l.Block, l.AllocatedAt.UTC().Format(time.RFC3339), l.Reason)
		}
		t.flush()
		hint(out, "nothing uses them: `routedctl ipam gc` frees them (or `routedctl ipam release --ip ADDRESS`, one at a time).")
	}
	if len(r.DeadNodeBlocks) > 0 {
		section(out, "Blocks of deleted nodes (removed by gc once empty)")
		t := newTable(out, "BLOCK", "NODE", "IN USE")
		for _, b := range r.DeadNodeBlocks {
			t.row(b.CIDR, b.Node, b.InUse)
		}
		t.flush()
		hint(out, "`routedctl ipam gc` removes each one once nothing in it is allocated (delete the pods still in it first).")
	}
	if len(r.DanglingAffinities) > 0 {
		section(out, "Affinities without a block")
		t := newTable(out, "NODE", "BLOCK", "STATE")
		for _, a := range r.DanglingAffinities {
			t.row(a.Node, a.CIDR, a.State)
		}
		t.flush()
		hint(out, "left by an interrupted block claim or release: `routedctl ipam gc` removes them.")
	}
	if len(r.EmptyHandles) > 0 {
		section(out, "Handles holding no address")
		for _, h := range r.EmptyHandles {
			fmt.Fprintf(out, "  %s\n", h)
		}
		hint(out, "left by an interrupted release: `routedctl ipam gc` removes them.")
	}
	if len(r.Overlaps) > 0 {
		section(out, "Overlapping blocks (two nodes can give one address to two pods)")
		t := newTable(out, "BLOCK", "NODE", "OVERLAPS", "NODE", "ALLOCATED IN BOTH")
		for _, o := range r.Overlaps {
			t.row(o.A.CIDR, orDash(o.A.Node), o.B.CIDR, orDash(o.B.Node), orDash(joinAddrs(o.Shared)))
		}
		t.flush()
		hint(out, "a pool's blockSize or cidr was changed under its blocks: recreate the pods holding the addresses listed so they move off one block, then run `routedctl ipam gc`.")
	}
	if len(r.OutsidePools) > 0 {
		section(out, "Blocks outside every pool")
		t := newTable(out, "BLOCK", "NODE", "IN USE")
		for _, b := range r.OutsidePools {
			t.row(b.CIDR, orDash(b.Node), b.InUse)
		}
		t.flush()
		hint(out, "their pool was deleted or changed: recreate the pool as it was, or recreate their pods (new addresses from a current pool) and run `routedctl ipam gc`.")
	}
	if len(r.SharedAddresses) > 0 {
		section(out, "Addresses named by more than one endpoint")
		t := newTable(out, "IP", "ENDPOINTS")
		for _, a := range r.SharedAddresses {
			t.row(a.IP, strings.Join(a.Endpoints, ", "))
		}
		t.flush()
		hint(out, "two pods use one address: recreate all but the one IPAM holds it for (see the endpoints below), so each gets its own.")
	}
	if len(r.EndpointMismatches) > 0 {
		section(out, "Endpoints whose address IPAM does not hold for them")
		t := newTable(out, "ENDPOINT", "NODE", "IP", "REASON")
		for _, m := range r.EndpointMismatches {
			t.row(m.Endpoint, m.Node, m.IP, m.Reason)
		}
		t.flush()
		hint(out, "recreate these pods so IPAM allocates their addresses; an endpoint whose pod is gone: `routedctl delete workloadendpoint NAME`.")
	}
	if len(r.Inconsistencies) > 0 {
		section(out, "Inconsistent records")
		for _, s := range r.Inconsistencies {
			fmt.Fprintf(out, "  %s\n", s)
		}
		hint(out, "`routedctl ipam gc` rewrites handle records and affinities from the blocks; anything it cannot repair is a bug worth reporting.")
	}
	if r.YoungLeaks > 0 {
		fmt.Fprintf(out, "\n%d unused allocation(s) younger than %s not reported (pods may still be starting).\n", r.YoungLeaks, grace)
	}
	if r.Held != "" {
		fmt.Fprintf(out, "\nGC frees no pod address now: %s.\n", r.Held)
	}
}

// printGC writes what GC did.
func printGC(out io.Writer, r *ipam.Report) {
	did := false
	list := func(what string, n int, items string) {
		if n == 0 {
			return
		}
		did = true
		fmt.Fprintf(out, "%s (%d): %s\n", what, n, items)
	}
	list("Released leaked addresses", len(r.Released), joinAddrs(r.Released))
	list("Removed blocks", len(r.RemovedBlocks), joinPrefixes(r.RemovedBlocks))
	affs := make([]string, len(r.RemovedAffinities))
	for i, a := range r.RemovedAffinities {
		affs[i] = fmt.Sprintf("%s/%s", a.Node, a.CIDR)
	}
	list("Removed affinities", len(affs), strings.Join(affs, ", "))
	list("Removed handles", len(r.RemovedHandles), strings.Join(r.RemovedHandles, ", "))
	for _, s := range r.Repaired {
		did = true
		fmt.Fprintf(out, "Repaired: %s\n", s)
	}
	for _, s := range r.Errors {
		fmt.Fprintf(out, "Failed: %s\n", s)
	}
	if !did && len(r.Errors) == 0 {
		fmt.Fprintln(out, "Nothing to clean up.")
	}
	if r.YoungLeaks > 0 {
		fmt.Fprintf(out, "%d unused allocation(s) are younger than the grace period and were left alone.\n", r.YoungLeaks)
	}
	if r.Held != "" {
		fmt.Fprintf(out, "No pod address was freed: %s.\n", r.Held)
	}
}

// hint is the one line under a section that says what to do about it.
func hint(out io.Writer, what string) {
	fmt.Fprintln(out, "  Fix: "+what)
}

func section(out io.Writer, format string, args ...any) {
	fmt.Fprintf(out, "\n"+format+":\n", args...)
}

// table is an indented, aligned table under a section heading.
type table struct{ tw *tabwriter.Writer }

func newTable(out io.Writer, header ...any) *table {
	t := &table{tw: tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)}
	t.row(header...)
	return t
}

func (t *table) row(cols ...any) {
	cells := make([]string, len(cols))
	for i, c := range cols {
		cells[i] = fmt.Sprint(c)
	}
	fmt.Fprintln(t.tw, "  "+strings.Join(cells, "\t"))
}

func (t *table) flush() { t.tw.Flush() }

func joinAddrs(a []netip.Addr) string {
	s := make([]string, len(a))
	for i, x := range a {
		s[i] = x.String()
	}
	return strings.Join(s, ", ")
}

func joinPrefixes(p []netip.Prefix) string {
	s := make([]string, len(p))
	for i, x := range p {
		s[i] = x.String()
	}
	return strings.Join(s, ", ")
}
