package policy_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
)

// netsetOver is a NetworkSet (namespace ns) or, with ns "", a
// GlobalNetworkSet holding pod c's addresses (10.65.0.3, fd00:65::3),
// so that c's packets come from the set's nets while c's own endpoint
// (namespace dev, app c) matches none of the selectors below.
func netsetOver(name, ns, labels string) string {
	if ns == "" {
		return "\n---\napiVersion: projectcalico.org/v3\nkind: GlobalNetworkSet\nmetadata: {name: " + name + ", labels: " + labels + "}\nspec: {nets: [10.65.0.3/32, 'fd00:65::3/128']}\n"
	}
	return "\n---\napiVersion: projectcalico.org/v3\nkind: NetworkSet\nmetadata: {name: " + name + ", namespace: " + ns + ", labels: " + labels + "}\nspec: {nets: [10.65.0.3/32, 'fd00:65::3/128']}\n"
}

// TestNetworkSetNamespaceLabel (security review finding 4): a
// NetworkSet's selectors see projectcalico.org/namespace as its own
// namespace, whatever its labels say, and its namespace's profile's
// labels, as Calico gives them. Real traffic from c's addresses, which
// only a network set puts in the rules' sets:
//   - a tenant's set in dev labelled projectcalico.org/namespace: prod
//     is not admitted by an admin rule allowing prod (it was), and a
//     warning names the set and the label;
//   - a tenant's set is not taken for a global one by
//     "!has(projectcalico.org/namespace)" (it was), while a
//     GlobalNetworkSet still is;
//   - a Deny of prod covers prod's NetworkSets (it missed them), and a
//     selector on the namespace's profile labels (pcns.env) sees them.
func TestNetworkSetNamespaceLabel(t *testing.T) {
	l := newLab(t)
	hook := new(logtest.Hook)
	oldHooks := logrus.StandardLogger().ReplaceHooks(logrus.LevelHooks{})
	logrus.StandardLogger().AddHook(hook)
	t.Cleanup(func() { logrus.StandardLogger().ReplaceHooks(oldHooks) })
	allowProd := gnpOnB("admin", `[{action: Allow, source: {selector: "projectcalico.org/namespace == 'prod'"}}]`)
	l.load(netsetOver("mine", "dev", "{projectcalico.org/namespace: prod}") + "---" + allowProd)
	l.apply()
	warned := false
	for _, e := range hook.AllEntries() {
		if e.Level == logrus.WarnLevel && e.Data["networkSet"] == "dev/mine" && strings.Contains(fmt.Sprint(e.Data["labels"]), "projectcalico.org/namespace=prod") {
			warned = true
		}
	}
	if !warned {
		t.Error("no warning naming dev/mine and its label projectcalico.org/namespace=prod")
	}
	l.expect("a dev NetworkSet claiming namespace prod",
		append(both(drop("c", "b", "tcp", 8080)), both(pass("a", "b", "tcp", 8080))...)...)
	l.loadOrDelete(netsetOver("mine", "dev", "{}")+"---"+allowProd, true)

	global := gnpOnB("global-partners", `[{action: Allow, source: {selector: "role == 'partner' && !has(projectcalico.org/namespace)"}}]`)
	l.load(netsetOver("partners", "dev", "{role: partner}") + "---" + global)
	l.apply()
	l.expect("a dev NetworkSet under a global-only selector", both(drop("c", "b", "tcp", 8080))...)
	l.load(netsetOver("partners-global", "", "{role: partner}"))
	l.apply()
	l.expect("a GlobalNetworkSet under a global-only selector", both(pass("c", "b", "tcp", 8080))...)
	l.loadOrDelete(netsetOver("partners", "dev", "{}")+netsetOver("partners-global", "", "{}")+"---"+global, true)

	for _, sel := range []string{"projectcalico.org/namespace == 'prod'", "pcns.env == 'prod'"} {
		deny := gnpOnB("quarantine-prod", `[{action: Deny, source: {selector: "`+sel+`"}}, {action: Allow}]`)
		l.load(netsetOver("partners", "prod", "{role: partner}") + "---" + deny)
		l.apply()
		l.expect("Deny "+sel+" over prod's NetworkSet",
			append(both(drop("c", "b", "tcp", 8080)), both(drop("a", "b", "tcp", 8080))...)...)
		l.loadOrDelete(netsetOver("partners", "prod", "{}"), true)
		l.apply()
		l.expect("Deny "+sel+" without the NetworkSet",
			append(both(pass("c", "b", "tcp", 8080)), both(drop("a", "b", "tcp", 8080))...)...)
		l.loadOrDelete(deny, true)
	}
}

// TestNetworkSetNegatedScopes (security review finding 5): a namespace
// or service account selector that Calico's label expansion makes true
// without a namespace or service account ("!has(x)") matches a
// GlobalNetworkSet, so a Deny with it covers the set's nets (it never
// did); namespaceSelector all() and service account names still never
// match one.
func TestNetworkSetNegatedScopes(t *testing.T) {
	l := newLab(t)
	l.load(netsetOver("bad", "", "{kind: bad}"))
	for _, tc := range []struct {
		name, src string
		want      bool // c -> b passes
	}{
		{"namespaceSelector !has(trusted)", `{namespaceSelector: "!has(trusted)", selector: "kind == 'bad'"}`, false},
		{"serviceAccounts selector !has(trusted)", `{serviceAccounts: {selector: "!has(trusted)"}, selector: "kind == 'bad'"}`, false},
		{"namespaceSelector all()", `{namespaceSelector: all(), selector: "kind == 'bad'"}`, true},
		{"serviceAccounts names", `{serviceAccounts: {names: [sa-c]}, selector: "kind == 'bad'"}`, true},
	} {
		deny := gnpOnB("deny-bad", `[{action: Deny, source: `+tc.src+`}, {action: Allow}]`)
		l.load(deny)
		l.apply()
		p := both(drop("c", "b", "tcp", 8080))
		if tc.want {
			p = both(pass("c", "b", "tcp", 8080))
		}
		l.expect(tc.name, append(p, both(pass("a", "b", "tcp", 8080))...)...)
		l.loadOrDelete(deny, true)
	}
}
