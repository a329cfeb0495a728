package nftdp

import (
	"crypto/sha256"
	"encoding/base32"
	"fmt"
	"slices"
	"strings"
)

// A verdict rule may also log the packets it decides (LogGroup set on
// an Accept, Drop, Pass, Return, MarkAccept or Notrack rule: felix's
// flow marks). The log is limited (LogRate), and a limit that is over
// ends its rule, so it cannot share the verdict's rule: the packet
// would fall through to the next rules and get their verdict. Nor can
// it be a rule of its own with the same matches before the verdict's
// (how flow marks were written first): every new flow would then
// evaluate each rule's matches twice.
//
// So such a rule is written as its matches, its counter and a goto to
// a small chain of this package's, its tail:
//
//	<matches> counter goto fm-<action>-<hash>
//	fm-<action>-<hash>:
//	    limit rate N/second burst N log prefix "..." group G
//	    <the verdict>
//
// Over the limit, the tail's first rule ends early and the second
// gives the verdict all the same. A goto, not a jump: the tail's
// return (Pass, which also sets the pass bit, and a profile's Return)
// goes back to whatever jumped to the rule's chain, as a return in the
// rule's own chain would, and accept and drop end the hook wherever
// they are. The rule keeps its ID and counter, so counters, Explain and
// the log's prefix name it as before.
//
// A tail is named by its content (the verdict and the log's group,
// rate and prefix), so it never changes: it is created by the
// transaction that first writes a rule going to it (before that rule)
// and deleted by the one that removes the last such rule (after it),
// reference counted across chains (a rule with named ports is several
// nftables rules going to one tail). Like every regular chain it is in
// a family's table only while a rule there leads to it (reach.go), and
// a resync compares and repairs it like any other.

// tailPrefix starts every tail chain's name; callers may not use it.
const tailPrefix = "fm-"

// isTail reports whether name is a tail chain's.
func isTail(name string) bool { return strings.HasPrefix(name, tailPrefix) }

// tailed reports whether r is a verdict rule that also logs, written
// through a tail chain.
func (r *Rule) tailed() bool { return r.LogGroup != 0 && tailActions(r.Action) }

// tailActions are the verdicts a tail may give.
func tailActions(a Action) bool {
	switch a {
	case ActAccept, ActDrop, ActPass, ActReturn, ActMarkAccept, ActNotrack:
		return true
	}
	return false
}

// tailRules are the rules of r's tail chain: the limited log, then the
// verdict.
func (r *Rule) tailRules() []Rule {
	return []Rule{
		{Action: ActLog, LogGroup: r.LogGroup, LogRate: r.LogRate, LogPrefix: r.LogPrefix},
		{Action: r.Action},
	}
}

// tailName is the name of r's tail chain.
func (r *Rule) tailName() string {
	h := sha256.Sum256(fmt.Appendf(nil, "%d|%d|%d|%s", r.Action, r.LogGroup, r.LogRate, r.LogPrefix))
	return tailPrefix + r.Action.String() + "-" + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(h[:10]))
}

// checkLogs refuses a log on a rule that can carry none: only Log rules
// and the verdicts above log.
func checkLogs(chain string, rules []Rule) error {
	for i := range rules {
		r := &rules[i]
		if r.LogGroup != 0 && r.Action != ActLog && !r.tailed() {
			return fmt.Errorf("nftdp: chain %s rule %d: a log (group %d) on a %s rule: only log rules and accept, drop, pass, return, mark-accept and notrack rules log", chain, i, r.LogGroup, r.Action)
		}
	}
	return nil
}

// tailsOf lists the tail chains rules go to, sorted, without repeats.
func tailsOf(rules []Rule) []string {
	var out []string
	for i := range rules {
		if rules[i].tailed() {
			out = append(out, rules[i].tailName())
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// useTails moves a chain's references from the tails old to the tails
// now (both from tailsOf), wanting the tails of now (from rules) that
// are new and dropping those of old that lose their last user.
func (d *Dataplane) useTails(old, now []string, rules []Rule) {
	byName := map[string]*Rule{}
	for i := range rules {
		if r := &rules[i]; r.tailed() {
			byName[r.tailName()] = r
		}
	}
	for _, name := range now {
		if d.tailRefs[name]++; d.tailRefs[name] == 1 {
			rs := byName[name].tailRules()
			keys := make([]string, len(rs))
			for j := range rs {
				keys[j] = rs[j].key()
			}
			d.chains[name] = &chainWant{rules: rs, keys: keys}
			d.dirtyChains[name] = true
		}
	}
	for _, name := range old {
		if d.tailRefs[name]--; d.tailRefs[name] <= 0 {
			delete(d.tailRefs, name)
			delete(d.chains, name)
			d.dirtyChains[name] = true
		}
	}
}
