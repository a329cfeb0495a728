package nftdp

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/google/nftables"
	"github.com/google/nftables/userdata"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// ruleSummary is what a resync and a counter read need of one rule: its
// chain, handle, comment (the rule's key, see Rule.key) and the sum of
// its counters. Nothing else of the rule is decoded.
type ruleSummary struct {
	chain   string
	handle  uint64
	comment string
	counter Counter
	counted bool // the rule has a counter expression
}

// ruleDumper reads every rule of a table in one netlink dump
// (NFT_MSG_GETRULE with only the table named). The nftables library
// dumps one chain per request and decodes every expression, which for a
// node with thousands of chains made a resync take seconds.
type ruleDumper struct{ conn *netlink.Conn }

// errDumpInterrupted means the table changed during every attempt to
// dump it.
var errDumpInterrupted = errors.New("nftdp: rule dump interrupted by concurrent changes")

// dumpAttempts bounds the retries of a dump the kernel marked as
// interrupted (the ruleset changed while it was read).
const dumpAttempts = 3

// newRuleDumper opens a netlink socket in the namespace netnsFd (-1:
// the caller's).
func newRuleDumper(netnsFd int) (*ruleDumper, error) {
	cfg := &netlink.Config{}
	if netnsFd >= 0 {
		cfg.NetNS = netnsFd
	}
	c, err := netlink.Dial(unix.NETLINK_NETFILTER, cfg)
	if err != nil {
		return nil, fmt.Errorf("nftdp: opening netlink for rule dumps: %w", err)
	}
	return &ruleDumper{conn: c}, nil
}

func (r *ruleDumper) close() error { return r.conn.Close() }

// rules returns every rule of the table in that family, chain by chain
// in the kernel's order and in rule order within a chain. A missing
// table has no rules.
func (r *ruleDumper) rules(fam nftables.TableFamily, table string) ([]ruleSummary, error) {
	var out []ruleSummary
	err := r.dump(fam, unix.NFT_MSG_GETRULE, unix.NFT_MSG_NEWRULE, "rules of "+table,
		[]netlink.Attribute{{Type: unix.NFTA_RULE_TABLE, Data: []byte(table + "\x00")}},
		func() { out = out[:0] },
		func(b []byte) error {
			s, err := parseRuleSummary(b)
			if err != nil {
				return err
			}
			out = append(out, s)
			return nil
		})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// dump runs one netlink dump of the nftables request get with attrs
// and hands the body (after nfgenmsg) of each reply of type reply to
// each. A dump the kernel marks as interrupted (the ruleset changed
// while it was read) is read again, up to dumpAttempts times, with
// begin called before each attempt so that the caller starts over. A
// missing table or set (ENOENT) dumps nothing. what names the object in
// errors ("rules of filter", "set a4 of filter").
func (r *ruleDumper) dump(fam nftables.TableFamily, get, reply int, what string, attrs []netlink.Attribute, begin func(), each func(b []byte) error) error {
	data, err := netlink.MarshalAttributes(attrs)
	if err != nil {
		return err
	}
	req := netlink.Message{
		Header: netlink.Header{
			Type:  netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | get),
			Flags: netlink.Request | netlink.Dump,
		},
		// nfgenmsg: family, version, resource id (unused).
		Data: append([]byte{byte(fam), unix.NFNETLINK_V0, 0, 0}, data...),
	}
	want := netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | reply)
	for range dumpAttempts {
		begin()
		msgs, err := r.conn.Execute(req)
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("nftdp: dumping %s: %w", what, err)
		}
		interrupted := false
		for _, m := range msgs {
			interrupted = interrupted || m.Header.Flags&netlink.DumpInterrupted != 0
			if m.Header.Type != want || len(m.Data) < 4 {
				continue
			}
			if err := each(m.Data[4:]); err != nil {
				return fmt.Errorf("nftdp: decoding %s: %w", what, err)
			}
		}
		if !interrupted {
			return nil
		}
	}
	return fmt.Errorf("%w (%s)", errDumpInterrupted, what)
}

// parseRuleSummary decodes a rule's attributes, and of its expressions
// only the counters.
func parseRuleSummary(b []byte) (ruleSummary, error) {
	var s ruleSummary
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return s, err
	}
	ad.ByteOrder = binary.BigEndian
	for ad.Next() {
		switch ad.Type() {
		case unix.NFTA_RULE_CHAIN:
			s.chain = ad.String()
		case unix.NFTA_RULE_HANDLE:
			s.handle = ad.Uint64()
		case unix.NFTA_RULE_USERDATA:
			s.comment, _ = userdata.GetString(ad.Bytes(), userdata.TypeComment)
		case unix.NFTA_RULE_EXPRESSIONS:
			ad.Nested(func(list *netlink.AttributeDecoder) error {
				for list.Next() {
					if list.Type() == unix.NFTA_LIST_ELEM {
						list.Nested(func(e *netlink.AttributeDecoder) error {
							if n, ok := counterExpr(e); ok {
								s.counter.Packets += n.Packets
								s.counter.Bytes += n.Bytes
								s.counted = true
							}
							return nil
						})
					}
				}
				return nil
			})
		}
	}
	return s, ad.Err()
}

// counterExpr decodes e's packets and bytes if it is a counter
// expression. The kernel puts an expression's name before its data
// (nft_expr_dump), and only a counter's data is decoded.
func counterExpr(e *netlink.AttributeDecoder) (Counter, bool) {
	var name string
	var n Counter
	for e.Next() {
		switch e.Type() {
		case unix.NFTA_EXPR_NAME:
			name = e.String()
		case unix.NFTA_EXPR_DATA:
			if name != "counter" {
				continue
			}
			e.Nested(func(d *netlink.AttributeDecoder) error {
				for d.Next() {
					switch d.Type() {
					case unix.NFTA_COUNTER_BYTES:
						n.Bytes = d.Uint64()
					case unix.NFTA_COUNTER_PACKETS:
						n.Packets = d.Uint64()
					}
				}
				return nil
			})
		}
	}
	return n, name == "counter"
}

// addRuleCounters adds the counters of rules with an ID to out, for the
// rules whose chain keep accepts (all when keep is nil).
func addRuleCounters(out map[string]Counter, rules []ruleSummary, keep func(chain string) bool) {
	for i := range rules {
		r := &rules[i]
		id := ruleID(r.comment)
		if id == "" || !r.counted || (keep != nil && !keep(r.chain)) {
			continue
		}
		sum := out[id]
		sum.Packets += r.counter.Packets
		sum.Bytes += r.counter.Bytes
		out[id] = sum
	}
}
