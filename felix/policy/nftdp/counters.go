package nftdp

import (
	"fmt"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"
)

// CounterReader reads the rule counters of the policy tables as the
// kernel has them, on a netlink socket of its own: it never writes, so
// it may run on another goroutine than the Dataplane's (felix polls it
// without holding up programming). A CounterReader is used from one
// goroutine.
type CounterReader struct {
	dump  *ruleDumper
	table string
}

// NewCounterReader opens netlink in the namespace netnsFd (-1: the
// caller's) to read table ("" for DefaultTable).
func NewCounterReader(netnsFd int, table string) (*CounterReader, error) {
	if table == "" {
		table = DefaultTable
	}
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnsupported, err)
	}
	unix.Close(fd)
	d, err := newRuleDumper(netnsFd)
	if err != nil {
		return nil, err
	}
	return &CounterReader{dump: d, table: table}, nil
}

// Close releases the socket.
func (r *CounterReader) Close() error { return r.dump.close() }

// Read returns the counters of every rule that carries an ID, keyed by
// ID and summed over both families (see Dataplane.Counters): one dump
// of each family's table, so chains felix deletes meanwhile cannot make
// it fail. A missing table reads as no counters.
func (r *CounterReader) Read() (map[string]Counter, error) {
	out := map[string]Counter{}
	for _, fam := range []nftables.TableFamily{nftables.TableFamilyIPv4, nftables.TableFamilyIPv6} {
		rules, err := r.dump.rules(fam, r.table)
		if err != nil {
			return nil, fmt.Errorf("nftdp: reading counters: %w", err)
		}
		addRuleCounters(out, rules, nil)
	}
	return out, nil
}
