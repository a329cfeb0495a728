package policy

import (
	"crypto/sha256"
	"encoding/base32"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/selector"
)

// ErrInvalid is matched by every error about a resource the calculator
// cannot use; the message names the field and what it accepts.
var ErrInvalid = errors.New("policy: invalid resource")

func fieldErr(field string, i int, val any, msg string) error {
	if i >= 0 {
		field = fmt.Sprintf("%s[%d]", field, i)
	}
	return fmt.Errorf("%w: %s %q %s", ErrInvalid, field, fmt.Sprint(val), msg)
}

// scope says which namespaces a matcher looks in.
type scope uint8

const (
	scopeAll   scope = iota // every namespace, and global network sets
	scopeOwnNS              // one namespace (a NetworkPolicy's own)
	scopeNSSel              // namespaces whose labels match nsSel
)

// matcher picks endpoints (and network sets) the way one side of a rule,
// or a policy's own selector, does. Matchers with the same id pick the
// same things, so they share one nftables set.
type matcher struct {
	id    string
	sel   selector.Selector // nil: all()
	scope scope
	ns    string
	nsSel selector.Selector
	// Service accounts: the endpoint's must be in saNames (when given)
	// and its labels match saSel (when given). A network set has none:
	// names never match it, saSel sees empty labels.
	hasSA   bool
	saNames []string
	saSel   selector.Selector
}

func parseSel(field, s string) (selector.Selector, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	sel, err := selector.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalid, field, err)
	}
	return sel, nil
}

// newMatcher compiles selector, namespace selector and service accounts.
// policyNS is the namespace of a NetworkPolicy ("" for a global one):
// without a namespace selector its rules see only their own namespace.
func newMatcher(field, sel, nsSel, policyNS string, saNames []string, saSel string) (*matcher, error) {
	m := &matcher{ns: policyNS}
	var err error
	if m.sel, err = parseSel(field+".selector", sel); err != nil {
		return nil, err
	}
	if m.nsSel, err = parseSel(field+".namespaceSelector", nsSel); err != nil {
		return nil, err
	}
	if m.saSel, err = parseSel(field+".serviceAccounts.selector", saSel); err != nil {
		return nil, err
	}
	switch {
	case m.nsSel != nil:
		m.scope = scopeNSSel
	case policyNS != "":
		m.scope = scopeOwnNS
	}
	m.saNames = slices.Sorted(slices.Values(saNames))
	m.hasSA = len(saNames) > 0 || m.saSel != nil
	m.id = fmt.Sprintf("sel=%s;scope=%d;ns=%s;nssel=%s;sa=%t:%s:%s",
		selString(m.sel), m.scope, m.ns, selString(m.nsSel), m.hasSA, strings.Join(m.saNames, ","), selString(m.saSel))
	if m.scope != scopeOwnNS {
		m.id = strings.Replace(m.id, ";ns="+m.ns+";", ";ns=;", 1)
	}
	return m, nil
}

func selString(s selector.Selector) string {
	if s == nil {
		return "all()"
	}
	return s.String()
}

func eval(s selector.Selector, labels map[string]string) bool { return s == nil || s.Evaluate(labels) }

// group reports whether the matcher picks the endpoints of g.
func (m *matcher) group(g *group) bool {
	switch m.scope {
	case scopeOwnNS:
		if g.ns != m.ns {
			return false
		}
	case scopeNSSel:
		// Calico reads namespaceSelector all() as "has a namespace": it
		// never picks a host endpoint (which has none). Other namespace
		// selectors see a host endpoint's empty namespace labels, as in
		// Calico (!has(x) picks it).
		if g.ns == "" && m.nsSel.String() == "all()" {
			return false
		}
		if !eval(m.nsSel, g.nsLabels.m) {
			return false
		}
	}
	if m.hasSA {
		if len(m.saNames) > 0 && !slices.Contains(m.saNames, g.sa) {
			return false
		}
		if !eval(m.saSel, g.saLabels.m) {
			return false
		}
	}
	return m.sel == nil || m.sel.EvaluateLabels(labelView{g})
}

// netset reports whether the matcher picks a network set, as Calico's
// expansion of the rule's selectors does: the namespace selector sees
// the set's namespace's labels (a GlobalNetworkSet's are empty, so
// "!has(x)" picks it; all(), which Calico reads as "has a namespace",
// does not), the service account selector an empty set of labels (no
// network set has a service account, so names never match and
// "!has(x)" does), and the selector the set's labels as selLabels makes
// them.
func (m *matcher) netset(s *netset) bool {
	if m.hasSA {
		if len(m.saNames) > 0 || !eval(m.saSel, nil) {
			return false
		}
	}
	switch m.scope {
	case scopeOwnNS:
		if s.Namespace != m.ns {
			return false
		}
	case scopeNSSel:
		if s.Namespace == "" && m.nsSel.String() == "all()" {
			return false
		}
		if !eval(m.nsSel, s.nsLabels) {
			return false
		}
	}
	return eval(m.sel, s.selLabels)
}

// netset is a NetworkSet with its namespace's labels and the labels its
// selectors see.
type netset struct {
	NetworkSet
	nsLabels  map[string]string
	selLabels map[string]string
}

// newNetset makes a network set's view for selectors. kns is its
// namespace's profile (kns.<namespace>, nil if none or for a global set).
func newNetset(s NetworkSet, kns *profile) *netset {
	n := &netset{NetworkSet: s, selLabels: s.Labels}
	if s.Namespace == "" {
		return n
	}
	n.nsLabels = scopeLabels(nil, nsLabelPrefix, kns, s.Namespace)
	n.selLabels = netsetLabels(s.Namespace, s.Labels, kns)
	return n
}

// netsetLabels are the labels a namespaced NetworkSet's selectors see,
// as Calico gives them (libcalico-go's network set processor): its
// namespace profile's labelsToApply, its own over them, and
// projectcalico.org/namespace set to its namespace over both, whatever
// the set says, so a tenant cannot pass its set off as another
// namespace's (or as a global one, "!has(projectcalico.org/namespace)").
// projectcalico.org/serviceaccount is taken off: a network set has no
// service account, so a rule naming one never matches a tenant's set
// claiming it (Calico leaves a user's label there).
func netsetLabels(ns string, own map[string]string, kns *profile) map[string]string {
	out := map[string]string{}
	if kns != nil {
		maps.Insert(out, kns.labels.all())
	}
	maps.Copy(out, own)
	delete(out, api.LabelServiceAccount)
	out[api.LabelNamespace] = ns
	return out
}

// netsetForgedLabels names the labels of a namespaced NetworkSet that
// netsetLabels overrides or takes off (for a warning: the set's author
// meant something routed does not do).
func netsetForgedLabels(ns string, own map[string]string) []string {
	var out []string
	if v, ok := own[api.LabelNamespace]; ok && v != ns {
		out = append(out, api.LabelNamespace+"="+v)
	}
	if v, ok := own[api.LabelServiceAccount]; ok {
		out = append(out, api.LabelServiceAccount+"="+v)
	}
	return out
}

// hashName makes a short nftables-safe name from an identity string.
func hashName(prefix, id string) string {
	h := sha256.Sum256([]byte(id))
	return prefix + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(h[:10]))
}
