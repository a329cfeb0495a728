package ctl

import (
	"context"
	"strings"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
)

// WorkloadEndpoints are not namespaced resources (their datastore names
// are <node>-<orchestrator>-<namespace>-<pod>-<interface>), but `get`
// prints them as NAMESPACE/POD, the WORKLOAD column, and takes that form
// back: `get workloadendpoint default/pod11`, or `-n default pod11`. A
// name without a slash and without -n is the datastore name.

// isWorkloadRef reports whether arg (with -n namespace) names a workload
// as NAMESPACE/POD rather than an endpoint by its datastore name.
func isWorkloadRef(namespace, arg string) bool {
	return namespace != "" || strings.Contains(arg, "/")
}

// workloadEndpoints returns the endpoints of the workload arg names
// (every interface of the pod, sorted by datastore name), or an error
// wrapping datastore.ErrNotFound that names it.
func workloadEndpoints(ctx context.Context, c *datastore.Client, namespace, arg string) ([]api.Resource, error) {
	ns, pod, hasSlash := strings.Cut(arg, "/")
	if !hasSlash {
		ns, pod = namespace, arg
	} else if namespace != "" && namespace != ns {
		return nil, usageError("%q names namespace %q but -n says %q", arg, ns, namespace)
	}
	if ns == "" || pod == "" || strings.Contains(pod, "/") {
		return nil, usageError("a workloadendpoint is named NAMESPACE/POD (as get prints it), -n NAMESPACE POD, or by its datastore name, not %q", arg)
	}
	all, _, err := c.List(ctx, api.KindWorkloadEndpoint)
	if err != nil {
		return nil, err
	}
	var out []api.Resource
	for _, r := range all {
		if w := r.(*api.WorkloadEndpoint); w.Spec.Namespace == ns && w.Spec.Pod == pod {
			out = append(out, r)
		}
	}
	if len(out) == 0 {
		return nil, &datastore.ObjectError{Kind: api.KindWorkloadEndpoint, Name: ns + "/" + pod, Err: datastore.ErrNotFound}
	}
	return out, nil
}

// inWorkloadNamespace keeps the endpoints of one namespace's pods: -n
// on a list of workloadendpoints.
func inWorkloadNamespace(rs []api.Resource, namespace string) []api.Resource {
	var out []api.Resource
	for _, r := range rs {
		if r.(*api.WorkloadEndpoint).Spec.Namespace == namespace {
			out = append(out, r)
		}
	}
	return out
}
