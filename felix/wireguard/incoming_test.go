package wireguard

import (
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/google/nftables"

	"github.com/routed-net/routed/felix/internal/nstest"
)

// nftList lists a table of family fam in n ("" and the error when it
// is not there).
func nftList(n *nstest.NS, fam, table string) (string, error) {
	out, err := exec.Command("ip", "netns", "exec", n.Name, "nft", "list", "table", fam, table).CombinedOutput()
	return string(out), err
}

// TestIncomingMarkARPFamily: on this kernel (CONFIG_NF_TABLES_ARP=y)
// the probe finds the arp family, both tables are written and ARP is
// marked, and the probe's own table is gone. With the probe standing
// for a kernel without the family, Apply writes the inet table alone
// for real (no error, no arp table), ARPUnmarked says why, and turning
// the tables off removes the inet table; with the family back (a full
// resync) both tables are written again.
func TestIncomingMarkARPFamily(t *testing.T) {
	nstest.RequireRoot(t)
	n := nstest.New(t)
	fd := int(n.NetNS.Fd())

	m := &IncomingMark{NetNSFd: fd, WorkloadPrefix: "cali"}
	m.Set(true)
	if err := m.Apply(false); err != nil {
		t.Fatal(err)
	}
	if err := m.ARPUnmarked(); err != nil {
		t.Errorf("ARPUnmarked on a kernel with the arp family: %v", err)
	}
	for _, fam := range []string{"inet", "arp"} {
		if out, err := nftList(n, fam, IncomingTable); err != nil || !strings.Contains(out, "meta mark set meta mark | 0x00100000") {
			t.Errorf("%s table (%v):\n%s", fam, err, out)
		}
	}
	if out, err := nftList(n, "arp", IncomingTable+"-probe"); err == nil {
		t.Errorf("the probe left its table:\n%s", out)
	}

	// A kernel without the family, in a fresh namespace.
	n2 := nstest.New(t)
	probeErr := errors.New("Operation not supported")
	m2 := &IncomingMark{NetNSFd: int(n2.NetNS.Fd()), WorkloadPrefix: "cali",
		ARPFamily: func(*nftables.Conn) error { return probeErr }}
	m2.Set(true)
	if err := m2.Apply(false); err != nil {
		t.Fatalf("Apply without the arp family: %v", err)
	}
	if err := m2.ARPUnmarked(); err == nil || !errors.Is(err, probeErr) || !strings.Contains(err.Error(), "CONFIG_NF_TABLES_ARP") {
		t.Errorf("ARPUnmarked = %v, want the probe's error naming CONFIG_NF_TABLES_ARP", err)
	}
	if out, err := nftList(n2, "inet", IncomingTable); err != nil || !strings.Contains(out, "meta mark set meta mark | 0x00100000") {
		t.Errorf("inet table without the arp family (%v):\n%s", err, out)
	}
	if out, err := nftList(n2, "arp", IncomingTable); err == nil {
		t.Errorf("arp table written although the family is refused:\n%s", out)
	}
	// Still fine on the next passes (no retry, no error).
	if err := m2.Apply(true); err != nil {
		t.Fatalf("full resync without the arp family: %v", err)
	}
	m2.Set(false)
	if err := m2.Apply(false); err != nil {
		t.Fatalf("removing the tables: %v", err)
	}
	if m2.ARPUnmarked() != nil {
		t.Error("ARPUnmarked while the tables are not wanted")
	}
	if out, err := nftList(n2, "inet", IncomingTable); err == nil {
		t.Errorf("inet table left after turning off:\n%s", out)
	}
	// The family back: both tables at the next full resync.
	m2.Set(true)
	m2.ARPFamily = nil
	if err := m2.Apply(true); err != nil {
		t.Fatal(err)
	}
	if m2.ARPUnmarked() != nil {
		t.Errorf("ARPUnmarked with the family back: %v", m2.ARPUnmarked())
	}
	if _, err := nftList(n2, "arp", IncomingTable); err != nil {
		t.Errorf("no arp table with the family back: %v", err)
	}
}
