package main

import (
	"context"
	"fmt"
	"time"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/tests/lab"
)

// editPolicy is the GlobalNetworkPolicy the policy phase edits: it
// selects every endpoint and allows one TCP port, a new one per edit.
const editPolicy = "scale-edit"

// policyEdits applies edits changes to one policy selecting every pod
// and times each from the datastore write to the moment the edited rule
// is in the last node's nftables ruleset (the kernel's own events).
// Edit 0 creates the policy (its chains, every node's dispatch) and is
// reported on its own.
func policyEdits(ctx context.Context, s *lab.Scale, edits int) error {
	w, err := s.WatchPorts()
	if err != nil {
		return err
	}
	defer w.Stop()
	var all, perNode []float64
	var first float64
	missing := 0
	for i := 0; i <= edits; i++ {
		port := uint16(30000 + i)
		pol := &api.GlobalNetworkPolicy{
			TypeMeta: api.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindGlobalNetworkPolicy},
			Metadata: api.ObjectMeta{Name: editPolicy},
		}
		pol.Spec.Selector = "all()"
		pol.Spec.Types = []api.PolicyType{api.PolicyTypeIngress}
		tcp := api.ProtocolFromName(api.ProtocolTCP)
		pol.Spec.Ingress = []api.Rule{{Action: api.ActionAllow, Protocol: &tcp,
			Destination: api.EntityRule{Ports: []api.Port{api.SinglePort(port)}}}}
		t0 := time.Now()
		if err := datastore.RetryUnavailable(ctx, func() error {
			_, err := s.DS.Apply(ctx, pol)
			return err
		}); err != nil {
			return fmt.Errorf("policy edit %d: %w", i, err)
		}
		deadline := time.Now().Add(60 * time.Second)
		var seen map[string]time.Time
		for {
			seen = w.Seen(port)
			if len(seen) >= len(s.Nodes) || time.Now().After(deadline) {
				break
			}
			if !sleep(ctx, 5*time.Millisecond) {
				return ctx.Err()
			}
		}
		if err := w.Err(); err != nil {
			return err
		}
		if len(seen) < len(s.Nodes) {
			missing++
			fmt.Printf("policy edit %d: in %d of %d nodes' tables after 60 s\n", i, len(seen), len(s.Nodes))
			continue
		}
		var last time.Time
		for _, at := range seen {
			if at.After(last) {
				last = at
			}
			if i > 0 {
				perNode = append(perNode, ms(at.Sub(t0)))
			}
		}
		if i == 0 {
			first = ms(last.Sub(t0))
			continue
		}
		all = append(all, ms(last.Sub(t0)))
	}
	if err := s.DS.Delete(ctx, api.KindGlobalNetworkPolicy, editPolicy, ""); err != nil {
		return err
	}
	fmt.Printf("policy: created in every node's tables after %.0f ms\n", first)
	fmt.Printf("policy edit -> last node's tables: %d edits, p50 %.0f ms, p99 %.0f ms, max %.0f ms; per node: %d samples, p50 %.0f ms, p99 %.0f ms\n",
		len(all), pct(all, 50), pct(all, 99), pct(all, 100), len(perNode), pct(perNode, 50), pct(perNode, 99))
	if len(all) < 200 {
		fmt.Printf("note: %d edits; p99 over edits needs at least 200 (raise -policy-edits)\n", len(all))
	}
	if missing > 0 {
		return fmt.Errorf("%d policy edits never reached every node's tables", missing)
	}
	return nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
