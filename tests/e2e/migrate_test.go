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
