package daemon

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/vishvananda/netns"

	"github.com/routed-net/routed/internal/testenv"
	"github.com/routed-net/routed/routed/cnitoken"
)

// sh runs a command and fails the test on error.
func sh(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %v\n%s", args, err, out)
	}
	return string(out)
}

// TestUninstallRemovesWireguardState (issue 40, finding 5): the
// uninstall path routed runs when its DaemonSet is deleted
// (uninstallIfDeleted), run in a fresh network namespace holding what
// host encryption leaves (rule 99 "not fwmark 0x100000 lookup 82" proto
// 82 in both families, routes in table 82, the devices wg.routed and
// wg-v6.routed, the nftables tables inet and arp routed-wireguard), removes all
// of it and leaves the rest: a rule looking up table 82 with another
// protocol, another table's rule and route, a main-table route, another
// device and another nftables table. A second run finds nothing and
// fails on nothing.
func TestUninstallRemovesWireguardState(t *testing.T) {
	testenv.RequireRoot(t, "network namespaces")
	name := fmt.Sprintf("routed-uninst-%d", os.Getpid())
	sh(t, "ip", "netns", "add", name)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	ip := func(args ...string) string { return sh(t, append([]string{"ip", "-n", name}, args...)...) }
	nft := func(args ...string) string {
		return sh(t, append([]string{"ip", "netns", "exec", name, "nft"}, args...)...)
	}
	ip("link", "add", "eth0", "type", "veth", "peer", "name", "eth1")
	ip("addr", "add", "192.0.2.1/24", "dev", "eth0")
	ip("-6", "addr", "add", "fd00:40::1/64", "dev", "eth0", "nodad")
	ip("link", "set", "eth0", "up")
	// wireguard-go's devices are TUN devices (this kernel may have no
	// WireGuard module; the cleanup goes by name).
	for _, d := range []string{"wg.routed", "wg-v6.routed", "wg0"} {
		ip("tuntap", "add", d, "mode", "tun")
	}
	for _, d := range []string{"wg.routed", "wg-v6.routed", "wg0"} {
		ip("link", "set", d, "up")
	}
	ip("route", "add", "192.0.2.2/32", "dev", "wg.routed", "table", "82", "proto", "82", "src", "192.0.2.1")
	ip("-6", "route", "add", "fd00:40::2/128", "dev", "wg-v6.routed", "table", "82", "proto", "82")
	for _, fam := range []string{"-4", "-6"} {
		ip(fam, "rule", "add", "not", "fwmark", "0x100000/0x100000", "lookup", "82", "priority", "99", "proto", "82")
	}
	ip("rule", "add", "fwmark", "0x5", "lookup", "82", "priority", "200", "proto", "static")
	ip("rule", "add", "fwmark", "0x6", "lookup", "100", "priority", "201", "proto", "82")
	ip("route", "add", "198.51.100.0/24", "dev", "eth0", "table", "100")
	ip("route", "add", "203.0.113.0/24", "dev", "eth0", "proto", "static")
	nft("add", "table", "inet", "routed-wireguard")
	nft("add", "chain", "inet", "routed-wireguard", "mark-incoming", "{ type filter hook prerouting priority raw; }")
	nft("add", "table", "arp", "routed-wireguard")
	nft("add", "chain", "arp", "routed-wireguard", "mark-incoming", "{ type filter hook input priority filter; }")
	nft("add", "table", "inet", "someone-else")
	// The flow records' generation rules (flowrec.GenTable), as a
	// routed with --flows-source poll leaves them.
	nft("add", "table", "inet", "routed-flows")
	nft("add", "chain", "inet", "routed-flows", "postrouting", "{ type filter hook postrouting priority 300; }")

	// The uninstall path itself, as routed runs it in the host's
	// namespace: on a thread switched into the lab's.
	dir := t.TempDir()
	netDir := filepath.Join(dir, "net.d")
	if err := os.MkdirAll(netDir, 0o755); err != nil {
		t.Fatal(err)
	}
	conflist := filepath.Join(netDir, "10-routed.conflist")
	if err := os.WriteFile(conflist, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := CNITokenConfig{Kubeconfig: filepath.Join(netDir, "routed-kubeconfig"), CNIConfName: "10-routed.conflist",
		CNIBinDir: filepath.Join(dir, "bin"), LogDir: filepath.Join(dir, "log"), DaemonSet: "routed"}
	inNS(t, name, func() { uninstallIfDeleted(cnitoken.Config{Namespace: "kube-system"}, c, nil, true) })
	if _, err := os.Stat(conflist); !os.IsNotExist(err) {
		t.Errorf("the conflist is still there (%v): the files' part of the uninstall did not run", err)
	}

	for _, fam := range []string{"-4", "-6"} {
		rules := ip(fam, "rule", "show")
		if strings.Contains(rules, "99:") {
			t.Errorf("%s: routed's rule is still there:\n%s", fam, rules)
		}
		if r := ip(fam, "route", "show", "table", "82"); strings.TrimSpace(r) != "" {
			t.Errorf("%s: table 82 still has routes:\n%s", fam, r)
		}
	}
	rules := ip("rule", "show")
	for _, want := range []string{"200:\tfrom all fwmark 0x5 lookup 82 proto static", "201:\tfrom all fwmark 0x6 lookup 100 proto 82"} {
		if !strings.Contains(rules, want) {
			t.Errorf("a rule that is not routed's host encryption rule went: want %q in\n%s", want, rules)
		}
	}
	for d, want := range map[string]bool{"wg.routed": false, "wg-v6.routed": false, "wg0": true, "eth0": true} {
		if err := exec.Command("ip", "-n", name, "link", "show", "dev", d).Run(); (err == nil) != want {
			t.Errorf("device %s: present %v, want %v", d, err == nil, want)
		}
	}
	if r := ip("route", "show", "table", "100"); !strings.Contains(r, "198.51.100.0/24") {
		t.Errorf("table 100's route went: %q", r)
	}
	if r := ip("route", "show"); !strings.Contains(r, "203.0.113.0/24") {
		t.Errorf("the main table's route went: %q", r)
	}
	tables := nft("list", "tables")
	if strings.Contains(tables, "routed-wireguard") || strings.Contains(tables, "routed-flows") || !strings.Contains(tables, "someone-else") {
		t.Errorf("nftables tables after the uninstall, want routed-wireguard and routed-flows gone and someone-else kept:\n%s", tables)
	}

	// Again: nothing left to remove, no error.
	removed, err := uninstallKernel("/run/netns/" + name)
	if err != nil || len(removed) != 0 {
		t.Errorf("second uninstall: removed %v, error %v; want nothing and no error", removed, err)
	}

	// The arp table alone (an earlier uninstall interrupted between
	// the two, or a kernel that refused the pair) goes too.
	nft("add", "table", "arp", "routed-wireguard")
	removed, err = uninstallKernel("/run/netns/" + name)
	if err != nil || len(removed) != 1 {
		t.Errorf("uninstall with only the arp table: removed %v, error %v; want the table and no error", removed, err)
	}
	if tables := nft("list", "tables"); strings.Contains(tables, "routed-wireguard") {
		t.Errorf("the arp table routed-wireguard is still there:\n%s", tables)
	}
}

// inNS runs f on a locked OS thread switched into the named namespace
// (what runs there opens its netlink and nftables sockets on it).
func inNS(t *testing.T, name string, f func()) {
	t.Helper()
	target, err := netns.GetFromName(name)
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// The thread is not unlocked: if switching back fails it must
		// die with the goroutine rather than serve others.
		orig, err := netns.Get()
		if err != nil {
			done <- err
			return
		}
		defer orig.Close()
		if err := netns.Set(target); err != nil {
			done <- err
			return
		}
		f()
		if err := netns.Set(orig); err != nil {
			done <- err
			return
		}
		runtime.UnlockOSThread()
		done <- nil
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
