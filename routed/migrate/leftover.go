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
// for, what the operator loses. Types not listed get leftoverDefault.
var leftoverWhy = map[string]string{
	"clusterinformations":           "routed keeps its own cluster identity",
	"kubecontrollersconfigurations": "routed runs no Calico kube-controllers",
	"caliconodestatuses":            "status, written by Calico's nodes",
}

const leftoverDefault = "routed has no such resource"

// leftovers lists what of Calico's datastore the migration does not
// read at all: resource types routed has no counterpart for, grouped by
// type with a count and the first names.
func leftovers(ctx context.Context, from *datastore.Client) ([]string, error) {
	carried := map[string]bool{api.KindWorkloadEndpoint.Plural(): true}
	for _, k := range calicoKinds {
		carried[k.Plural()] = true
	}
	keys, err := listKeys(ctx, from, calicoResources)
	if err != nil {
		return nil, err
	}
	names := map[string][]string{}
	for _, k := range keys {
		plural, name, _ := strings.Cut(strings.TrimPrefix(k, calicoResources), "/")
		if !carried[plural] {
			names[plural] = append(names[plural], name)
		}
	}
	var out []string
	for _, plural := range slices.Sorted(maps.Keys(names)) {
		out = append(out, fmt.Sprintf("%d %s (%s): %s", len(names[plural]), plural, firstNames(names[plural]), why(plural)))
	}
	return out, nil
}

func why(plural string) string {
	if w := leftoverWhy[plural]; w != "" {
		return w
	}
	return leftoverDefault
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
