package policy_test

import (
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/routed-net/routed/pkg/api"
)

// captureLog records what the standard logger (the package's) logs
// during the test.
func captureLog(t *testing.T) *logtest.Hook {
	t.Helper()
	hook := new(logtest.Hook)
	old := logrus.StandardLogger().ReplaceHooks(logrus.LevelHooks{})
	logrus.AddHook(hook)
	t.Cleanup(func() { logrus.StandardLogger().ReplaceHooks(old) })
	return hook
}

// logged fails unless an entry at level logged since the last call
// names every one of words; it forgets what it read.
func logged(t *testing.T, hook *logtest.Hook, level logrus.Level, words ...string) {
	t.Helper()
	defer hook.Reset()
	for _, e := range hook.AllEntries() {
		if e.Level != level {
			continue
		}
		all := true
		for _, w := range words {
			all = all && strings.Contains(e.Message, w)
		}
		if all {
			return
		}
	}
	var got []string
	for _, e := range hook.AllEntries() {
		got = append(got, e.Level.String()+": "+e.Message)
	}
	t.Errorf("no %s entry naming %q; logged:\n%s", level, words, strings.Join(got, "\n"))
}

// TestHostEndpointShadowed: two host endpoints for one interface of the
// node (named, or found there by address) and two "*" ones: only the
// one whose name sorts first applies, whichever came first (Calico's
// rule), proved with real traffic; the other is logged as a warning
// naming both endpoints and the interface, and takes over, with an
// info line, when the first goes.
func TestHostEndpointShadowed(t *testing.T) {
	hook := captureLog(t)
	h := newHostLab(t)

	h.hep("node-eth1-b", "eth1", nil, api.DefaultAllowProfile)
	h.expect("node-eth1-b alone allows all", hpass("x", "host", "tcp", 80), hpass("host", "x", "tcp", 80))
	h.hep("node-eth1-a", "eth1", nil) // no profile, no policy: denies
	h.expect("node-eth1-a, whose name sorts first, governs eth1",
		hdrop("x", "host", "tcp", 80), hdrop("host", "x", "tcp", 80), hpass("x", "host", "tcp", 22), hpass("y", "host", "tcp", 80))
	logged(t, hook, logrus.WarnLevel, "node-eth1-b", "node-eth1-a", "interface eth1", "not enforced")

	h.m.DeleteHostEndpoint("node-eth1-a")
	h.apply()
	h.expect("node-eth1-a gone: node-eth1-b takes over", hpass("x", "host", "tcp", 80), hpass("host", "x", "tcp", 80))
	logged(t, hook, logrus.InfoLevel, "no longer so", "node-eth1-b")

	// Found on eth1 by its address, with a name that sorts first: it
	// governs eth1 (Calico does not prefer a named match).
	byIP := &api.HostEndpoint{Metadata: api.ObjectMeta{Name: "node-by-ip"},
		Spec: api.HostEndpointSpec{Node: "node", ExpectedIPs: []string{h.x.NodeAddr(false).String()}}}
	if err := byIP.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := h.m.SetHostEndpoint(byIP, true, "eth1"); err != nil {
		t.Fatal(err)
	}
	h.apply()
	h.expect("node-by-ip governs eth1", hdrop("x", "host", "tcp", 80), hpass("x", "host", "tcp", 22))
	logged(t, hook, logrus.WarnLevel, "node-eth1-b", "node-by-ip", "interface eth1")
	h.m.DeleteHostEndpoint("node-by-ip")
	h.m.DeleteHostEndpoint("node-eth1-b")
	h.apply()

	h.hep("all-b", "*", nil, api.DefaultAllowProfile)
	h.hep("all-a", "*", nil)
	h.expect("all-a governs every interface", hdrop("x", "host", "tcp", 80), hdrop("y", "host", "tcp", 80), hdrop("a", "host", "tcp", 80),
		hpass("x", "host", "tcp", 22))
	logged(t, hook, logrus.WarnLevel, "all-b", "all-a", "interface *")
	h.m.DeleteHostEndpoint("all-a")
	h.apply()
	h.expect("all-a gone: all-b takes over", hpass("x", "host", "tcp", 80), hpass("y", "host", "tcp", 80), hpass("a", "host", "tcp", 80))
	if w := h.m.HostEndpointWarnings(); len(w) != 0 {
		t.Errorf("warnings left: %+v", w)
	}
}

// TestHostEndpointDoNotTrackWildcardIgnored: a doNotTrack policy that
// selects a "*" endpoint is ignored there, as in Calico (real traffic:
// the deny-all endpoint still drops what it allows), and felix logs a
// warning naming the policy and the endpoint; the same policy on a
// named endpoint applies.
func TestHostEndpointDoNotTrackWildcardIgnored(t *testing.T) {
	hook := captureLog(t)
	h := newHostLab(t)
	h.hep("node-all", "*", map[string]string{"role": "edge"})
	h.load(untrackedHTTP(true))
	h.apply()
	h.expect("doNotTrack on * is ignored", hdrop("x", "host", "tcp", 80), hdrop("y", "host", "tcp", 80), hpass("x", "host", "tcp", 22))
	logged(t, hook, logrus.WarnLevel, "gnp:untracked-http", "node-all", "ignored")

	h.hep("node-eth1", "eth1", map[string]string{"role": "edge"})
	h.expect("the same policy on a named endpoint applies", hpass("x", "host", "tcp", 80), hdrop("y", "host", "tcp", 80))
}
