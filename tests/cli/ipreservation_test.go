package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/invoke"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/routed-net/routed/tests/testbin"
)

// ipamAdd execs routed-ipam for one pod as a container runtime does
// (against etcd itself: no routed socket) and returns its address, or
// the plugin's error.
func ipamAdd(t *testing.T, ep, dir, pod string) (netip.Addr, error) {
	t.Helper()
	plugin := testbin.Path(t, "routed-ipam")
	conf, err := json.Marshal(map[string]any{
		"cniVersion": "1.0.0", "name": "k8s-pod-network", "type": "routed-cni",
		"etcd_endpoints": ep, "nodename": "worker-1", "routed_socket": "none",
		"log_file_path":  filepath.Join(dir, "cni.log"),
		"ipam_lock_file": filepath.Join(dir, "ipam.lock"),
		"ipam":           map[string]any{"type": "routed-ipam"},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := invoke.ExecPluginWithResult(ctx, plugin, conf, &invoke.Args{
		Command: "ADD", ContainerID: pod, NetNS: "/var/run/netns/" + pod, IfName: "eth0",
		PluginArgsStr: "K8S_POD_NAMESPACE=default;K8S_POD_NAME=" + pod, Path: filepath.Dir(plugin),
	}, nil)
	if err != nil {
		return netip.Addr{}, err
	}
	r, err := current.NewResultFromResult(res)
	if err != nil || len(r.IPs) != 1 {
		t.Fatalf("result %v: %v", res, err)
	}
	a, _ := netip.AddrFromSlice(r.IPs[0].Address.IP)
	return a.Unmap(), nil
}

// TestIPReservationKeepsPodsOff applies Calico's IPReservation with
// routedctl and runs the real IPAM plugin as the runtime does: no pod
// gets a reserved address, the rest of the pool is handed out, and a
// reservation applied later keeps later pods off its addresses.
func TestIPReservationKeepsPodsOff(t *testing.T) {
	t.Parallel()
	ep := startEtcd(t)
	dir := t.TempDir()
	setup := `apiVersion: projectcalico.org/v3
kind: IPPool
metadata: {name: small}
spec: {cidr: 10.77.0.0/28, blockSize: 29, ipipMode: Never, natOutgoing: true}
---
apiVersion: projectcalico.org/v3
kind: IPReservation
metadata: {name: appliances}
spec:
  ReservedCIDRs: [10.77.0.1, 10.77.0.8/30]
`
	if out, errOut, code := ctl(t, ep, setup, "apply", "-f", "-"); code != 0 {
		t.Fatalf("apply: %s%s", out, errOut)
	}
	out, _, _ := ctl(t, ep, "", "get", "ipreservations", "appliances", "-o", "yaml")
	if !strings.Contains(out, "- 10.77.0.1\n") || !strings.Contains(out, "- 10.77.0.8/30") {
		t.Errorf("reservation as read back:\n%s", out)
	}

	laterSet := map[netip.Addr]bool{}
	reserved := func(a netip.Addr) bool {
		return a == netip.MustParseAddr("10.77.0.1") || netip.MustParsePrefix("10.77.0.8/30").Contains(a) || laterSet[a]
	}
	got := map[netip.Addr]bool{}
	for i := range 6 {
		a, err := ipamAdd(t, ep, dir, fmt.Sprintf("pod-%d", i))
		if err != nil {
			t.Fatalf("ADD %d: %v", i, err)
		}
		if reserved(a) || got[a] {
			t.Fatalf("pod %d got %s (reserved or taken)", i, a)
		}
		got[a] = true
	}
	// Reserve two of the addresses still free (which block was claimed
	// first is random).
	var later []string
	for a := netip.MustParseAddr("10.77.0.0"); len(later) < 2; a = a.Next() {
		if !got[a] && !reserved(a) {
			later = append(later, a.String())
			laterSet[a] = true
		}
	}
	doc := "apiVersion: projectcalico.org/v3\nkind: IPReservation\nmetadata: {name: later}\nspec: {reservedCIDRs: [" + strings.Join(later, ", ") + "]}\n"
	if out, errOut, code := ctl(t, ep, doc, "apply", "-f", "-"); code != 0 {
		t.Fatalf("apply later: %s%s", out, errOut)
	}
	for i := 6; ; i++ {
		a, err := ipamAdd(t, ep, dir, fmt.Sprintf("pod-%d", i))
		if err != nil {
			if !strings.Contains(err.Error(), "exhausted") {
				t.Fatalf("ADD %d: %v", i, err)
			}
			break
		}
		if reserved(a) || got[a] {
			t.Fatalf("pod %d got %s (reserved or taken)", i, a)
		}
		got[a] = true
	}
	// 16 addresses, 5 reserved at first and 2 later.
	if len(got) != 9 {
		t.Errorf("%d pods got addresses %v, want 9", len(got), got)
	}
}
