package wireguard

import (
	"errors"
	"fmt"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/routed-net/routed/pkg/kernel"
)

// HostRule reconciles one family's policy-routing rule for host
// encryption: "not fwmark FirewallMark/FirewallMark lookup RouteTable",
// at RulePriority, protocol 82. Rules that look RouteTable up with
// protocol 82 are routed's: any of them that is not the wanted rule is
// deleted; other rules are never touched. Not safe for concurrent use:
// felix's loop owns it.
type HostRule struct {
	// Family is netlink.FAMILY_V4 or FAMILY_V6.
	Family int
	want   bool
	// synced: the kernel held exactly want after the last Apply.
	synced bool
}

// Set records whether the rule should exist; Apply makes it so.
func (r *HostRule) Set(on bool) {
	if on != r.want {
		r.want, r.synced = on, false
	}
}

// Wanted reports what Set last asked for.
func (r *HostRule) Wanted() bool { return r.want }

// wantedRule is the rule as routed writes it.
func (r *HostRule) wantedRule() *netlink.Rule {
	rule := netlink.NewRule()
	rule.Family, rule.Priority, rule.Table = r.Family, RulePriority, RouteTable
	mask := uint32(FirewallMark)
	rule.Mark, rule.Mask, rule.Invert = FirewallMark, &mask, true
	rule.Protocol = kernel.RouteProtocol
	return rule
}

func (r *HostRule) isWanted(k netlink.Rule) bool {
	return k.Priority == RulePriority && k.Mark == FirewallMark && k.Mask != nil && *k.Mask == FirewallMark &&
		k.Invert && k.Src == nil && k.Dst == nil && k.IifName == "" && k.OifName == "" && k.Goto <= 0
}

// Apply reads the family's rules (always when full, else only when the
// wanted state changed since the last success) and adds or deletes
// routed's rules to match. A rule already gone is success.
func (r *HostRule) Apply(h *netlink.Handle, full bool) error {
	if r.synced && !full {
		return nil
	}
	filter := &netlink.Rule{Table: RouteTable}
	rules, err := h.RuleListFiltered(r.Family, filter, netlink.RT_FILTER_TABLE)
	if err != nil {
		return fmt.Errorf("wireguard: listing %s rules: %w", famName(r.Family), err)
	}
	have := false
	var errs []error
	for _, k := range rules {
		if k.Protocol != kernel.RouteProtocol {
			continue // not ours
		}
		if r.want && !have && r.isWanted(k) {
			have = true
			continue
		}
		k := k
		if err := h.RuleDel(&k); err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, fmt.Errorf("wireguard: deleting %s rule %v: %w", famName(r.Family), k, err))
		} else {
			log.WithField("rule", k.String()).Info("removed routed's host encryption rule")
		}
	}
	if r.want && !have {
		if err := h.RuleAdd(r.wantedRule()); err != nil && !errors.Is(err, unix.EEXIST) {
			errs = append(errs, fmt.Errorf("wireguard: adding %s rule (not fwmark %#x lookup %d): %w", famName(r.Family), FirewallMark, RouteTable, err))
		} else if err == nil {
			log.WithFields(map[string]any{"family": famName(r.Family), "table": RouteTable, "priority": RulePriority}).Info("host encryption rule added")
		}
	}
	err = errors.Join(errs...)
	r.synced = err == nil
	return err
}

func famName(fam int) string {
	if fam == netlink.FAMILY_V6 {
		return "IPv6"
	}
	return "IPv4"
}
