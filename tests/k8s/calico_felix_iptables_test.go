package k8s_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// felixMode is the dataplane Calico's felix programs on a node.
type felixMode struct {
	iptables bool
	ipv6     bool     // felix's IPv6 support on and the pods dual-stack
	backend  string   // in iptables mode, the node's iptables backend: "nft" or "legacy"
	env      []string // felix's settings for the mode
}

// save is the iptables-save of the mode's backend; other is that of the
// other backend, which felix must leave alone.
func (m felixMode) save() string  { return "iptables-" + m.backend + "-save" }
func (m felixMode) save6() string { return "ip6tables-" + m.backend + "-save" }
func (m felixMode) other() string {
	if m.backend == "legacy" {
		return "iptables-nft-save"
	}
	return "iptables-legacy-save"
}

var (
	// felixNFTables: all of felix's rules and sets in the nftables
	// table ip calico.
	felixNFTables = felixMode{env: []string{"FELIX_NFTABLESMODE=Enabled"}}
	// felixIptables is Calico's default dataplane: iptables chains
	// named cali-* (rules jumping to them from the built-in chains)
	// and ipsets. The backend is calico-node's default, auto: felix
	// picks the one where it finds the kubelet's chains (kubeletChains
	// writes them with iptables-nft, as a kubelet does on a host whose
	// iptables is iptables-nft, Debian's default since 11), so nft.
	felixIptables = felixMode{iptables: true, backend: "nft", env: []string{"FELIX_NFTABLESMODE=Disabled", "FELIX_IPTABLESBACKEND=auto"}}
	// felixIptablesLegacy is felixIptables on a node whose kubelet uses
	// iptables-legacy (hosts whose iptables is the legacy one): felix,
	// backend auto, finds the kubelet's chains there and picks legacy.
	felixIptablesLegacy = felixMode{iptables: true, backend: "legacy", env: felixIptables.env}
	// felixIptablesDualStack is felixIptables with IPv6: an IPv6 pool
	// beside the IPv4 one, dual-stack pods, FELIX_IPV6SUPPORT=true.
	felixIptablesDualStack = felixMode{iptables: true, ipv6: true, backend: "nft", env: append([]string{"FELIX_IPV6SUPPORT=true"}, felixIptables.env...)}
)

// TestCalicoFelixEnforcesOnKDDIptables is TestCalicoFelixEnforcesOnKDD
// with felix in iptables mode (felixIptables), then stopped: its chains
// and rules stay and keep enforcing (the denied port still does not
// answer) until docs/migrate-calico.md step 6.2's clean-up removes them
// (clearIptables), which leaves the kubelet's chains and rules as they
// were, and the port answers.
func TestCalicoFelixEnforcesOnKDDIptables(t *testing.T) {
	felixEnforcesOnKDD(t, felixIptables)
}

// TestCalicoFelixEnforcesOnKDDIptablesLegacy is
// TestCalicoFelixEnforcesOnKDDIptables on a node whose iptables backend
// is legacy (felixIptablesLegacy): the same verdicts, and step 6.2's
// loop removes felix's chains there and leaves the kubelet's.
func TestCalicoFelixEnforcesOnKDDIptablesLegacy(t *testing.T) {
	felixEnforcesOnKDD(t, felixIptablesLegacy)
}

// TestCalicoFelixEnforcesOnKDDIptablesDualStack is
// TestCalicoFelixEnforcesOnKDDIptables with dual-stack pods and felix's
// IPv6 support on (felixIptablesDualStack): the policies' verdicts hold
// over IPv4 and IPv6, felix's ip6tables chains stay when it stops, and
// step 6.2's loop removes them too (its ip6tables passes), leaving
// ip6tables' tables as they were before felix.
func TestCalicoFelixEnforcesOnKDDIptablesDualStack(t *testing.T) {
	felixEnforcesOnKDD(t, felixIptablesDualStack)
}

// kubeletChains writes into the iptables (backend "nft" or "legacy") of
// the network namespace netns what a kubelet writes into a node's (its
// canary and hint chains, which tell iptables wrappers and felix the
// backend in use, and the KUBE-FIREWALL rule of kubelets before 1.27)
// and returns iptablesSave of it: what Calico's clean-up must leave.
func kubeletChains(t *testing.T, netns, backend string) string {
	t.Helper()
	cmd := exec.Command("nsenter", "--net="+netns, "iptables-"+backend+"-restore", "--noflush")
	cmd.Stdin = strings.NewReader(`*mangle
:KUBE-IPTABLES-HINT - [0:0]
:KUBE-KUBELET-CANARY - [0:0]
COMMIT
*filter
:KUBE-FIREWALL - [0:0]
:KUBE-KUBELET-CANARY - [0:0]
-A INPUT -j KUBE-FIREWALL
-A OUTPUT -j KUBE-FIREWALL
-A KUBE-FIREWALL ! -s 127.0.0.0/8 -d 127.0.0.0/8 -m comment --comment "block incoming localnet connections" -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP
COMMIT
*nat
:KUBE-KUBELET-CANARY - [0:0]
COMMIT
`)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("writing the kubelet's iptables chains: %v\n%s", err, out)
	}
	return iptablesSave(t, netns, "iptables-"+backend+"-save")
}

// keptAsBefore checks save's output after the doc's clean-up (after)
// against its output before felix started (kept): every table that was
// there is as it was, the tables felix made hold only empty built-in
// chains.
func keptAsBefore(t *testing.T, save, after, kept string) {
	t.Helper()
	before := iptablesTables(kept)
	for name, table := range iptablesTables(after) {
		if want, ok := before[name]; ok {
			if table != want {
				t.Errorf("%s: table %s after the doc's clean-up:\n%s\nbefore felix started:\n%s", save, name, table, want)
			}
			continue
		}
		for _, line := range strings.Split(strings.TrimSpace(table), "\n") {
			if !strings.HasPrefix(line, "*") && line != "COMMIT" && !(strings.HasPrefix(line, ":") && strings.HasSuffix(line, " ACCEPT")) {
				t.Errorf("%s: table %s (felix made it) after the doc's clean-up has %q", save, name, line)
			}
		}
	}
	for name := range before {
		if !strings.Contains(after, "*"+name+"\n") {
			t.Errorf("%s: table %s gone after the doc's clean-up", save, name)
		}
	}
}

// counters are the packet and byte counts iptables-save prints per chain.
var counters = regexp.MustCompile(` \[\d+:\d+\]$`)

// iptablesSave is save's output (iptables-nft-save, iptables-legacy-save)
// in netns without its comment lines and counters.
func iptablesSave(t *testing.T, netns, save string) string {
	t.Helper()
	out, err := exec.Command("nsenter", "--net="+netns, save).Output()
	if err != nil {
		t.Fatalf("%s: %v", save, err)
	}
	var b strings.Builder
	for _, line := range strings.Split(string(out), "\n") {
		if line != "" && !strings.HasPrefix(line, "#") {
			b.WriteString(counters.ReplaceAllString(line, "") + "\n")
		}
	}
	return b.String()
}

// iptablesTables splits iptablesSave's output by table.
func iptablesTables(save string) map[string]string {
	tables := map[string]string{}
	name := ""
	for _, line := range strings.SplitAfter(save, "\n") {
		if strings.HasPrefix(line, "*") {
			name = strings.TrimSpace(line[1:])
		}
		if name != "" { // nothing outside a table (an empty save has no table)
			tables[name] += line
		}
	}
	return tables
}

// nsNFTables is `nft list tables` in netns.
func nsNFTables(t *testing.T, netns string) string {
	t.Helper()
	out, err := exec.Command("nsenter", "--net="+netns, "nft", "list", "tables").CombinedOutput()
	if err != nil {
		t.Fatalf("nft list tables: %v\n%s", err, out)
	}
	return string(out)
}

// checkProgrammed checks that felix, ready, programmed its mode's
// dataplane on the node and not the other one.
func (f *calicoFelix) checkProgrammed(t *testing.T) {
	t.Helper()
	tables := nsNFTables(t, f.netns)
	if !f.mode.iptables {
		if !strings.Contains(tables, "calico") {
			t.Fatalf("no Calico nftables tables on the node:\n%s", tables)
		}
		return
	}
	if strings.Contains(tables, "calico") {
		t.Errorf("felix in iptables mode made an nftables table of its own:\n%s", tables)
	}
	save := iptablesSave(t, f.netns, f.mode.save())
	for _, want := range []string{":cali-FORWARD ", "-A FORWARD -m comment --comment \"cali:", ":cali-PREROUTING ", ":cali-POSTROUTING "} {
		if !strings.Contains(save, want) {
			t.Fatalf("no %q in %s: felix did not program the %s backend\n%s", want, f.mode.save(), f.mode.backend, save)
		}
	}
	if other := iptablesSave(t, f.netns, f.mode.other()); strings.Contains(other, "cali") {
		t.Errorf("felix wrote the other backend (%s) too:\n%s", f.mode.other(), other)
	}
	t.Logf("felix's iptables (%s backend): %d chains named cali-*", f.mode.backend, strings.Count(save, "\n:cali-"))
	if f.mode.ipv6 {
		save6 := iptablesSave(t, f.netns, f.mode.save6())
		if !strings.Contains(save6, ":cali-FORWARD ") {
			t.Fatalf("no cali-FORWARD in %s: felix did not program IPv6\n%s", f.mode.save6(), save6)
		}
		t.Logf("felix's ip6tables: %d chains named cali-*", strings.Count(save6, "\n:cali-"))
	}
}

// calicoIptablesCleanup is docs/migrate-calico.md step 6.2's clean-up of
// Calico's iptables mode: the lines from its `for ipt in` loop to its
// `ipset` line.
func calicoIptablesCleanup(t *testing.T) string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "migrate-calico.md"))
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, line := range strings.Split(string(doc), "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "for ipt in ") {
			lines = []string{}
		}
		if lines != nil {
			lines = append(lines, line)
			if strings.HasPrefix(trimmed, "ipset list -n") {
				return strings.Join(lines, "\n") + "\n"
			}
		}
	}
	t.Fatal("docs/migrate-calico.md has no iptables clean-up (`for ipt in` to `ipset list -n`)")
	return ""
}

// clearIptables checks what felix, stopped in iptables mode, left on
// the node (its chains, and its jumps from the built-in ones), runs the
// doc's clean-up there, and checks that it removed Calico's chains,
// rules and ipsets and nothing else: every table iptables had before
// felix started is as it was, the tables felix made hold only empty
// built-in chains, and nftables tables other than iptables' are kept.
func (f *calicoFelix) clearIptables(t *testing.T) {
	t.Helper()
	save := iptablesSave(t, f.netns, f.mode.save())
	if !strings.Contains(save, "-A FORWARD -m comment --comment \"cali:") {
		t.Fatalf("felix left no jump into its chains in FORWARD:\n%s", save)
	}
	nftBefore := nsNFTables(t, f.netns)
	t.Logf("felix stopped; it left %d cali-* chains, %d rules", strings.Count(save, "\n:cali-"), strings.Count(save, "\n-A "))
	if f.mode.ipv6 {
		save6 := iptablesSave(t, f.netns, f.mode.save6())
		if !strings.Contains(save6, "-A FORWARD -m comment --comment \"cali:") {
			t.Fatalf("felix left no jump into its chains in ip6tables' FORWARD:\n%s", save6)
		}
		t.Logf("and in ip6tables %d cali-* chains, %d rules", strings.Count(save6, "\n:cali-"), strings.Count(save6, "\n-A "))
	}
	script := calicoIptablesCleanup(t)
	if out, err := exec.Command("nsenter", "--net="+f.netns, "sh", "-ec", script).CombinedOutput(); err != nil {
		t.Fatalf("the doc's clean-up: %v\n%s\n%s", err, out, script)
	}
	keptAsBefore(t, f.mode.save(), iptablesSave(t, f.netns, f.mode.save()), f.kept)
	if f.mode.ipv6 {
		keptAsBefore(t, f.mode.save6(), iptablesSave(t, f.netns, f.mode.save6()), f.kept6)
	}
	if other := iptablesSave(t, f.netns, f.mode.other()); strings.Contains(other, "cali") {
		t.Errorf("%s after the doc's clean-up:\n%s", f.mode.other(), other)
	}
	out, err := exec.Command("nsenter", "--net="+f.netns, "ipset", "list", "-n").CombinedOutput()
	if err != nil || strings.Contains(string(out), "cali") {
		t.Errorf("ipsets after the doc's clean-up: %v\n%s", err, out)
	}
	if nftAfter := nsNFTables(t, f.netns); nftAfter != nftBefore {
		t.Errorf("nftables tables after the doc's clean-up:\n%s\nbefore:\n%s", nftAfter, nftBefore)
	}
}
