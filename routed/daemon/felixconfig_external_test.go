package daemon

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
	"github.com/sirupsen/logrus/hooks/test"

	"github.com/routed-net/routed/pkg/api"
)

// TestExternalNodesParsed: externalNodesList reaches felix as nets (an
// address as a /32 or /128, host bits cleared); a list with a bad entry,
// stored past validation, admits no external source at all rather than
// the entries that parse.
func TestExternalNodesParsed(t *testing.T) {
	list := []string{"192.0.2.7", "10.9.1.2/16", "fd00:9::1/64"}
	got := externalNodes(api.FelixConfigurationSpec{ExternalNodesCIDRList: &list})
	want := []netip.Prefix{netip.MustParsePrefix("192.0.2.7/32"), netip.MustParsePrefix("10.9.0.0/16"), netip.MustParsePrefix("fd00:9::/64")}
	if !slices.Equal(got, want) {
		t.Errorf("externalNodes(%v) = %v, want %v", list, got, want)
	}
	if got := externalNodes(api.FelixConfigurationSpec{}); got != nil {
		t.Errorf("unset list: %v, want none", got)
	}
	bad := []string{"10.9.0.0/16", "node-b"}
	if got := externalNodes(api.FelixConfigurationSpec{ExternalNodesCIDRList: &bad}); got != nil {
		t.Errorf("a list with a bad entry admitted %v", got)
	}
	if _, err := api.ExternalNodeNets(&bad); err == nil {
		t.Error("ExternalNodeNets accepted a name")
	} else if want := `spec.externalNodesList[1] "node-b"`; !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not name %s", err, want)
	}
}

// TestExternalNodesLoggedOnce: a refused list is logged once however
// many FelixConfiguration events repeat it, and again when it changes;
// a list with host bits set or a /0 is warned about once, naming each
// entry; a good list says nothing.
func TestExternalNodesLoggedOnce(t *testing.T) {
	logger, hook := test.NewNullLogger()
	lg := logrus.NewEntry(logger)
	var p externalNodesParser
	spec := func(l ...string) api.FelixConfigurationSpec {
		return api.FelixConfigurationSpec{ExternalNodesCIDRList: &l}
	}
	count := func(lvl logrus.Level, text string) int {
		n := 0
		for _, e := range hook.AllEntries() {
			msg := e.Message
			if err, ok := e.Data[logrus.ErrorKey].(error); ok {
				msg += " " + err.Error()
			}
			if e.Level == lvl && strings.Contains(msg, text) {
				n++
			}
		}
		return n
	}
	for range 3 {
		if got := p.parse(lg, spec("10.9.0.0/16", "node-b")); got != nil {
			t.Fatalf("a list with a bad entry admitted %v", got)
		}
	}
	if n := count(logrus.ErrorLevel, `spec.externalNodesList[1] "node-b"`); n != 1 {
		t.Errorf("the refused list was logged %d times over 3 events, want 1", n)
	}
	p.parse(lg, spec("node-c"))
	if n := count(logrus.ErrorLevel, `spec.externalNodesList[0] "node-c"`); n != 1 {
		t.Errorf("a changed refused list was logged %d times, want 1", n)
	}
	for range 3 {
		got := p.parse(lg, spec("10.0.0.5/24", "::/0"))
		if want := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24"), netip.MustParsePrefix("::/0")}; !slices.Equal(got, want) {
			t.Fatalf("warned list parsed as %v, want %v", got, want)
		}
	}
	if n := count(logrus.WarnLevel, `spec.externalNodesList[0] "10.0.0.5/24" has host bits set`); n != 1 {
		t.Errorf("host bits warned %d times, want 1", n)
	}
	if n := count(logrus.WarnLevel, `spec.externalNodesList[1] "::/0" admits every IPv6 source`); n != 1 {
		t.Errorf("::/0 warned %d times, want 1", n)
	}
	before := len(hook.AllEntries())
	p.parse(lg, spec("10.0.0.0/24"))
	if n := len(hook.AllEntries()); n != before {
		t.Errorf("a good list logged: %v", hook.AllEntries()[before:])
	}
}
