package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/routed-net/routed/tests/lab"
)

// TestMigrateFromCalicoKeepsPodsForwarding: the lab's etcd holds a
// Calico cluster (Calico's key layout and JSON, written by the test) with
// two pods already running on two nodes in different subnets, set up as
// Calico's CNI plugin leaves them. `routedctl migrate calico` carries it
// over before any routed starts; then the nodes start on the migrated
// state. The pods keep their addresses and reach each other, a new pod
// gets a different address and reaches them, ipam check is clean, a
// second migration changes nothing, and a CNI DEL of a migrated pod
// releases its address.
func TestMigrateFromCalicoKeepsPodsForwarding(t *testing.T) {
	var pods []lab.Pod
	var plan, migrated string
	l := startLabWith(t, func(topo *lab.Topology) {
		topo.Configure = func(ctx context.Context, l *lab.Lab) error {
			n := l.Topo.Nodes
			var err error
			pods, err = l.SeedCalico(ctx, []lab.CalicoPod{{Name: "cw2", Node: n[1].Name}, {Name: "cw3", Node: n[2].Name}})
			if err != nil {
				return err
			}
			if plan, err = l.Ctl(ctx, "migrate", "calico", "--from-etcd", l.Topo.EtcdEndpoint(), "--dry-run"); err != nil {
				return fmt.Errorf("migrate --dry-run: %w\n%s", err, plan)
			}
			if migrated, err = l.Ctl(ctx, "migrate", "calico", "--from-etcd", l.Topo.EtcdEndpoint()); err != nil {
				return fmt.Errorf("migrate: %w\n%s", err, migrated)
			}
			return nil
		}
	})
	t.Logf("plan:\n%s", plan)
	if !strings.Contains(migrated, "0 conflicts, 0 not carried over") || !strings.Contains(migrated, "IPAMBlock") {
		t.Fatalf("migration:\n%s", migrated)
	}
	ctx := context.Background()
	n := l.Topo.Nodes
	reach(t, l, pods[0], pods[1].IP)
	reach(t, l, pods[1], pods[0].IP)
	fresh := mustPod(t, l, n[1].Name, "new2")
	if fresh.IP == pods[0].IP || fresh.IP == pods[1].IP {
		t.Fatalf("a new pod got a migrated pod's address %s", fresh.IP)
	}
	reach(t, l, fresh, pods[1].IP)
	reach(t, l, pods[1], fresh.IP)
	t.Logf("migrated pods %s (%s) and %s (%s) reach each other and the new pod %s", pods[0].Name, pods[0].IP, pods[1].Name, pods[1].IP, fresh.IP)

	if out, err := l.Ctl(ctx, "ipam", "check"); err != nil {
		t.Fatalf("ipam check after the migration: %v\n%s", err, out)
	}
	again, err := l.Ctl(ctx, "migrate", "calico", "--from-etcd", l.Topo.EtcdEndpoint())
	if err != nil || !strings.Contains(again, "Migrated: 0 to create") {
		t.Fatalf("second migration with nodes running: %v\n%s", err, again)
	}
	if err := l.DelPod(ctx, pods[0]); err != nil {
		t.Fatalf("CNI DEL of a migrated pod: %v", err)
	}
	out, _ := l.Ctl(ctx, "ipam", "show", "--ip", pods[0].IP)
	if strings.Contains(out, "k8s-pod-network.") {
		t.Fatalf("the migrated pod's address is still allocated after its DEL:\n%s", out)
	}
}

// TestMigrateFromCalicoVXLAN: a Calico cluster on a VXLAN pool (each
// node with its VXLAN tunnel address in IPAM and on its Node, and the
// vxlan.calico device calico-node leaves) is migrated and its nodes are
// cleared as docs/migrate-calico.md says; routed then runs there. Pods on
// nodes in different subnets reach each other over vxlan.routed, which
// carries the node's Calico tunnel address, and a second migration is a
// no-op.
func TestMigrateFromCalicoVXLAN(t *testing.T) {
	var pods []lab.Pod
	var migrated string
	l := startLabWith(t, func(topo *lab.Topology) {
		topo.NoRouterBGP = true
		topo.VXLANMode = "Always"
		topo.Configure = func(ctx context.Context, l *lab.Lab) error {
			n := l.Topo.Nodes
			var err error
			pods, err = l.SeedCalico(ctx, []lab.CalicoPod{{Name: "vw2", Node: n[1].Name}, {Name: "vw3", Node: n[2].Name}})
			if err != nil {
				return err
			}
			if migrated, err = l.Ctl(ctx, "migrate", "calico", "--from-etcd", l.Topo.EtcdEndpoint()); err != nil {
				return fmt.Errorf("migrate: %w\n%s", err, migrated)
			}
			for _, node := range n {
				if err := l.ClearCalicoDataplane(ctx, node.Name); err != nil {
					return err
				}
			}
			return nil
		}
	})
	t.Logf("migration:\n%s", migrated)
	if !strings.Contains(migrated, "0 conflicts, 0 not carried over") {
		t.Fatalf("migration:\n%s", migrated)
	}
	ctx := context.Background()
	reach(t, l, pods[0], pods[1].IP)
	reach(t, l, pods[1], pods[0].IP)
	for _, p := range pods {
		addrs, err := l.NodeAddrs(ctx, p.Node)
		if err != nil {
			t.Fatal(err)
		}
		// SeedCalico puts the tunnel address at ordinal 0 of the pod's block.
		tunnel := strings.TrimSuffix(p.IP, ".1") + ".0/32"
		if !hasLine(addrs, "vxlan.routed", " "+tunnel) {
			t.Errorf("%s: vxlan.routed does not hold Calico's tunnel address %s:\n%s", p.Node, tunnel, addrs)
		}
	}
	if out, err := l.Ctl(ctx, "ipam", "check"); err != nil {
		t.Fatalf("ipam check: %v\n%s", err, out)
	}
	again, err := l.Ctl(ctx, "migrate", "calico", "--from-etcd", l.Topo.EtcdEndpoint())
	if err != nil || !strings.Contains(again, "Migrated: 0 to create, 0 to update") {
		t.Fatalf("second migration with nodes running: %v\n%s", err, again)
	}
}
