package nftdp

import (
	"fmt"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// CounterReader reads the rule counters of the policy tables as the
// kernel has them, on a netlink socket of its own: it never writes, so
// it may run on another goroutine than the Dataplane's (felix polls it
// without holding up programming). A CounterReader is used from one
// goroutine.
type CounterReader struct {
	conn  *nftables.Conn
	table string
}

// NewCounterReader opens nftables in the namespace netnsFd (-1: the
// caller's) to read table ("" for DefaultTable).
func NewCounterReader(netnsFd int, table string) (*CounterReader, error) {
	if table == "" {
		table = DefaultTable
	}
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnsupported, err)
	}
	unix.Close(fd)
	opts := []nftables.ConnOption{nftables.AsLasting(), nftables.WithSockOptions(bigBuffers)}
	if netnsFd >= 0 {
		opts = append(opts, nftables.WithNetNSFd(netnsFd))
	}
	c, err := nftables.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("nftdp: opening nftables: %w", err)
	}
	return &CounterReader{conn: c, table: table}, nil
}

// Close releases the socket.
func (r *CounterReader) Close() error { return r.conn.CloseLasting() }

// Read returns the counters of every rule that carries an ID, keyed by
// ID and summed over both families (see Dataplane.Counters). Tables or
// chains that vanish while being read are skipped.
func (r *CounterReader) Read() (map[string]Counter, error) {
	out := map[string]Counter{}
	for _, fam := range []nftables.TableFamily{nftables.TableFamilyIPv4, nftables.TableFamilyIPv6} {
		chains, err := r.conn.ListChainsOfTableFamily(fam)
		if err != nil {
			return nil, fmt.Errorf("nftdp: listing chains: %w", err)
		}
		t := &nftables.Table{Name: r.table, Family: fam}
		for _, c := range chains {
			if c.Table.Name != r.table {
				continue
			}
			rules, err := r.conn.GetRules(t, &nftables.Chain{Table: t, Name: c.Name})
			if err != nil {
				// The library does not wrap the kernel's errno: a chain
				// felix deleted meanwhile is told apart by looking again.
				if gone, gerr := r.chainGone(fam, c.Name); gerr == nil && gone {
					continue
				}
				return nil, fmt.Errorf("nftdp: reading chain %s: %w", c.Name, err)
			}
			addCounters(out, rules)
		}
	}
	return out, nil
}

// chainGone reports whether the chain is no longer in the table.
func (r *CounterReader) chainGone(fam nftables.TableFamily, name string) (bool, error) {
	chains, err := r.conn.ListChainsOfTableFamily(fam)
	if err != nil {
		return false, err
	}
	for _, c := range chains {
		if c.Table.Name == r.table && c.Name == name {
			return false, nil
		}
	}
	return true, nil
}

// addCounters adds the counters of rules with an ID to out.
func addCounters(out map[string]Counter, rules []*nftables.Rule) {
	for _, r := range rules {
		id := ruleID(commentOf(r))
		if id == "" {
			continue
		}
		for _, e := range r.Exprs {
			if c, ok := e.(*expr.Counter); ok {
				sum := out[id]
				sum.Packets += c.Packets
				sum.Bytes += c.Bytes
				out[id] = sum
			}
		}
	}
}
