package migrate

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
)

// Calico on the Kubernetes datastore keeps its resources as custom
// resources of crd.projectcalico.org/v1 (libcalico-go's KDD backend), or,
// from Calico 3.31 when so installed, of projectcalico.org/v3 (the same
// kinds and specs; the IPAM configuration is IPAMConfiguration there,
// and an affinity's "deleted" a boolean). Where both are served, v1 is
// the storage and projectcalico.org/v3 Calico's API server, which also
// serves objects it derives: v1 is read.
var (
	calicoCRDv1 = schema.GroupVersion{Group: "crd.projectcalico.org", Version: "v1"}
	calicoCRDv3 = schema.GroupVersion{Group: "projectcalico.org", Version: "v3"}
)

// crdKinds are the Calico resources kept as custom resources whose
// routed kind has the same name and plural; read in this order. Nodes,
// profiles and workload endpoints are derived from Kubernetes objects
// instead (kubepods.go); IPAM is read by kubeipam.go.
var crdKinds = []api.Kind{api.KindIPPool, api.KindIPReservation, api.KindFelixConfiguration,
	api.KindBGPConfiguration, api.KindBGPFilter, api.KindBGPPeer, api.KindHostEndpoint,
	api.KindTier, api.KindGlobalNetworkSet, api.KindNetworkSet, api.KindGlobalNetworkPolicy, api.KindNetworkPolicy,
	api.KindStagedGlobalNetworkPolicy, api.KindStagedNetworkPolicy, api.KindStagedKubernetesNetworkPolicy}

// CalicoKube reads a Calico cluster that keeps its data in Kubernetes
// (the API server at kube) and writes routed's datastore to as Calico
// (etcd source) does: pools, BGP configuration, filters and peers, tiers,
// policies and network sets from Calico's custom resources; a Node per
// Kubernetes node calico-node annotated; the namespace and service
// account profiles; a WorkloadEndpoint per running pod Calico's CNI
// plugin addressed; and the IPAM blocks, affinities and handles. Calico's
// state is only read. Idempotent, refused whole on any conflict, and
// opts.DryRun only plans, as for Calico.
func CalicoKube(ctx context.Context, kube *rest.Config, to *datastore.Client, opts Options) (*Report, error) {
	src, err := newKubeSource(kube)
	if err != nil {
		return nil, err
	}
	st, err := src.read(ctx)
	if err != nil {
		return nil, err
	}
	return carry(ctx, to, st, opts)
}

// kubeSource reads Calico's custom resources and the Kubernetes objects
// Calico derives state from.
type kubeSource struct {
	dyn  dynamic.Interface
	kube kubernetes.Interface
	// gv is the group and version Calico's resources are read from;
	// served the plurals it serves.
	gv     schema.GroupVersion
	served map[string]bool
	// ipamConfigs is the plural of Calico's IPAM configuration in gv.
	ipamConfigs string
	// blocks are Calico's converted blocks, which the endpoints' handles
	// are looked up in.
	blocks blockSet
	// anpServed are the plurals served in policy.networking.k8s.io/v1alpha1;
	// cnpServed, whether ClusterNetworkPolicy v1beta1 is (kubeanp.go).
	anpServed map[string]bool
	cnpServed bool
	// nodes are the Kubernetes nodes, by name (readKube).
	nodes map[string]*corev1.Node
}

// autoHostEndpoints reads Calico's KubeControllersConfigurations (status
// included: what calico-kube-controllers run) and says what becomes of
// the automatic host endpoints (autohep.go).
func (s *kubeSource) autoHostEndpoints(ctx context.Context, st *calicoState) error {
	items, err := s.listCRD(ctx, kubeControllersConfigs)
	if err != nil {
		return err
	}
	objs := map[string]map[string]any{}
	for i := range items {
		objs[fmt.Sprintf("%s.%s %s", kubeControllersConfigs, s.gv.Group, items[i].GetName())] = items[i].Object
	}
	cfg, err := st.kubeControllersConfig(objs)
	if err != nil {
		return err
	}
	st.autoHostEndpoints(cfg, s.nodes)
	return nil
}

func newKubeSource(cfg *rest.Config) (*kubeSource, error) {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("migrate: Kubernetes client: %w", err)
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("migrate: Kubernetes client: %w", err)
	}
	return &kubeSource{dyn: dyn, kube: kube}, nil
}

// discover finds which group holds Calico's custom resources; none is
// ErrNoCalico.
func (s *kubeSource) discover() error {
	for _, c := range []struct {
		gv          schema.GroupVersion
		ipamConfigs string
	}{{calicoCRDv1, "ipamconfigs"}, {calicoCRDv3, "ipamconfigurations"}} {
		served, err := s.servedIn(c.gv)
		if err != nil {
			return err
		}
		if served["ippools"] && served["ipamblocks"] {
			s.gv, s.served, s.ipamConfigs = c.gv, served, c.ipamConfigs
			return nil
		}
	}
	return fmt.Errorf("%w: the API server serves no IPPools and IPAMBlocks in %s or %s; is Calico installed on the Kubernetes datastore there?", ErrNoCalico, calicoCRDv1, calicoCRDv3)
}

func (s *kubeSource) read(ctx context.Context) (*calicoState, error) {
	if err := s.discover(); err != nil {
		return nil, err
	}
	if err := s.discoverAdmin(); err != nil {
		return nil, err
	}
	st := &calicoState{}
	// derived are Calico's conversions of admin network policies, by
	// "<plural>/<name>" of their original: losses unless the original
	// itself is listed as one (adminPolicies).
	derived := map[string]PolicyLoss{}
	for _, k := range crdKinds {
		items, err := s.listCRD(ctx, k.Plural())
		if err != nil {
			return nil, err
		}
		for _, u := range items {
			where := fmt.Sprintf("%s.%s %s", k.Plural(), s.gv.Group, objectName(&u))
			if why, carried, ok := s.derivedPolicy(k, &u); ok {
				if carried {
					st.skipped = append(st.skipped, fmt.Sprintf("%s: %s", where, why))
					continue
				}
				obj := calicoObject(&u)
				spec, _ := obj["spec"].(map[string]any)
				derived[adminOriginal(u.GetName())] = PolicyLoss{Kind: string(k), Name: objectStoreName(k, obj, where), Reason: why, Consequence: policyLoss(spec)}
				continue
			}
			obj := calicoObject(&u)
			st.felix.saw(k, obj)
			if r := st.convert(k, obj, where); r != nil {
				st.resources = append(st.resources, r)
			}
		}
	}
	if err := s.adminPolicies(ctx, st, derived); err != nil {
		return nil, err
	}
	if err := s.leftovers(ctx, st); err != nil {
		return nil, err
	}
	if err := s.felixEnv(ctx, st); err != nil {
		return nil, err
	}
	if err := s.readIPAM(ctx, st); err != nil {
		return nil, err
	}
	if err := s.readKube(ctx, st); err != nil {
		return nil, err
	}
	if err := s.autoHostEndpoints(ctx, st); err != nil {
		return nil, err
	}
	st.defaultAllowProfile()
	return st, nil
}

// listCRD lists every object of one of Calico's custom resources, page
// by page; a resource the API server does not serve (an older Calico
// without it) is empty.
func (s *kubeSource) listCRD(ctx context.Context, plural string) ([]unstructured.Unstructured, error) {
	if !s.served[plural] {
		return nil, nil
	}
	gvr := s.gv.WithResource(plural)
	var out []unstructured.Unstructured
	opts := metav1.ListOptions{Limit: 500}
	for {
		l, err := s.dyn.Resource(gvr).List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("migrate: listing Calico's %s.%s: %w", plural, s.gv.Group, err)
		}
		out = append(out, l.Items...)
		if opts.Continue = l.GetContinue(); opts.Continue == "" {
			return out, nil
		}
	}
}

func objectName(u *unstructured.Unstructured) string {
	if ns := u.GetNamespace(); ns != "" {
		return ns + "/" + u.GetName()
	}
	return u.GetName()
}

// calicoObject is the Calico v3 object a custom resource stands for:
// its spec as stored, and of the metadata only the name,
// the namespace and Calico's labels and annotations. libcalico-go keeps
// the v3 object's metadata in the annotation projectcalico.org/metadata
// and merges its labels over the custom resource's own.
func calicoObject(u *unstructured.Unstructured) map[string]any {
	labels := map[string]any{}
	for k, v := range u.GetLabels() {
		labels[k] = v
	}
	md := map[string]any{"name": u.GetName()}
	if ns := u.GetNamespace(); ns != "" {
		md["namespace"] = ns
	}
	if raw := u.GetAnnotations()["projectcalico.org/metadata"]; raw != "" {
		var meta struct {
			Name        string            `json:"name"`
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		}
		if json.Unmarshal([]byte(raw), &meta) == nil {
			if meta.Name != "" && tieredPolicy(api.Kind(u.GetKind())) {
				md["name"] = meta.Name // givenPolicyName
			}
			for k, v := range meta.Labels {
				labels[k] = v
			}
			if len(meta.Annotations) > 0 {
				ann := map[string]any{}
				for k, v := range meta.Annotations {
					ann[k] = v
				}
				md["annotations"] = ann
			}
		}
	}
	if len(labels) > 0 {
		md["labels"] = labels
	}
	// The status (an IPPool's conditions, a Tier's) is written by
	// Calico's components, never applied: it is not read.
	obj := map[string]any{"metadata": md}
	if v, ok := u.Object["spec"]; ok {
		obj["spec"] = v
	}
	return obj
}
