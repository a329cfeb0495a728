package migrate

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
)

// calicoRoot holds every key of Calico's etcdv3 datastore.
const calicoRoot = "/calico/"

// leftoverWhy says, per Calico resource type routed has no counterpart
// for and that decides no verdict, what the operator loses. Types not
// listed are policy losses (leftover).
var leftoverWhy = map[string]string{
	"clusterinformations": "routed keeps its own cluster identity",
	"caliconodestatuses":  "status, written by Calico's nodes",
	"qospolicies":         "routed applies no QoS policy: the bandwidth limits and DSCP marks it sets are not applied (no verdict changes)",
}

const leftoverDefault = "routed has no such resource"

// leftovers records what of Calico's datastore the migration does not
// read at all: resource types routed has no counterpart for, grouped by
// type with a count and the first names (leftover).
func (st *calicoState) leftovers(ctx context.Context, from *datastore.Client) error {
	carried := map[string]bool{api.KindWorkloadEndpoint.Plural(): true, kubeControllersConfigs: true}
	for _, k := range calicoKinds {
		carried[k.Plural()] = true
	}
	keys, err := listKeys(ctx, from, calicoResources)
	if err != nil {
		return err
	}
	names := map[string][]string{}
	for _, k := range keys {
		plural, name, _ := strings.Cut(strings.TrimPrefix(k, calicoResources), "/")
		if !carried[plural] {
			names[plural] = append(names[plural], name)
		}
	}
	for _, plural := range slices.Sorted(maps.Keys(names)) {
		st.leftover(plural, names[plural])
	}
	return nil
}

// leftover records the objects (names) of one Calico resource type the
// migration does not read. A type leftoverWhy knows changes no verdict
// and is a notice. Any other is a type routed does not know (Calico
// Enterprise's threat feeds, say, which fill network sets that deny
// rules select): it may decide verdicts, so it is a policy loss, which
// the operator accepts knowingly or not at all.
func (st *calicoState) leftover(plural string, names []string) {
	if w := leftoverWhy[plural]; w != "" {
		st.skipped = append(st.skipped, fmt.Sprintf("%d %s (%s): %s", len(names), plural, firstNames(names), w))
		return
	}
	st.losses = append(st.losses, PolicyLoss{Kind: plural, Name: firstNames(names),
		Reason:      fmt.Sprintf("%d of them; %s", len(names), leftoverDefault),
		Consequence: "routed cannot tell whether they decide what policy allows; if they do (filling network sets, say), what they denied would be allowed"})
}

// firstNames shows up to five names, then how many more.
func firstNames(names []string) string {
	if len(names) <= 5 {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:5], ", "), len(names)-5)
}

// listKeys lists the keys under prefix, sorted, without their values.
func listKeys(ctx context.Context, c *datastore.Client, prefix string) ([]string, error) {
	ctx, cancel := c.Ctx(ctx)
	defer cancel()
	resp, err := c.Etcd().Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
	if err != nil {
		return nil, fmt.Errorf("migrate: reading Calico's %s: %w", prefix, c.Wrap(err))
	}
	out := make([]string, len(resp.Kvs))
	for i, kv := range resp.Kvs {
		out[i] = string(kv.Key)
	}
	return out, nil
}

// hasCalico fails with ErrNoCalico when from holds nothing under /calico/:
// the wrong endpoint, or a Calico cluster on the Kubernetes datastore.
func hasCalico(ctx context.Context, from *datastore.Client) error {
	ctx, cancel := from.Ctx(ctx)
	defer cancel()
	resp, err := from.Etcd().Get(ctx, calicoRoot, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return fmt.Errorf("migrate: reading Calico's %s: %w", calicoRoot, from.Wrap(err))
	}
	if resp.Count == 0 {
		return fmt.Errorf("%w: the etcd at %s holds no %s keys; check --from-etcd (a Calico cluster on the Kubernetes datastore keeps its state in the API server: export it with calicoctl get -o yaml and apply the files)",
			ErrNoCalico, strings.Join(from.Endpoints(), ","), calicoRoot)
	}
	return nil
}
