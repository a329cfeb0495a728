package migrate

import (
	"strings"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/routed/controllers"
)

// handOver marks what calico-kube-controllers derives from Kubernetes
// objects into Calico's etcd as routed-controllers' own, naming the
// source object as they do (controllers.OwnerAnnotation,
// SourceAnnotation): a namespace's profile kns.<ns>, a service
// account's ksa.<ns>.<sa>, a Kubernetes NetworkPolicy's conversion
// knp.default.<name>. routed-controllers then keep it up to date and
// delete it with its source. Unmarked, they would leave it alone for
// good (they never touch what they did not write): a NetworkPolicy
// deleted after the migration would keep applying, a namespace's new
// labels would never reach its profile. Carried, rather than left for
// routed-controllers to write, so that each applies from routed's first
// moment on a node. (The Kubernetes source writes routed-controllers'
// own conversions; Calico keeps no such copies there.)
func handOver(r api.Resource) {
	m := r.Meta()
	var src string
	switch r.GetKind() {
	case api.KindProfile:
		if ns, ok := strings.CutPrefix(m.Name, api.NamespaceProfilePrefix); ok {
			src = ns
		} else if rest, ok := strings.CutPrefix(m.Name, api.ServiceAccountProfilePrefix); ok {
			// A namespace name has no dot: the first one ends it.
			if ns, sa, ok := strings.Cut(rest, "."); ok && ns != "" && sa != "" {
				src = ns + "/" + sa
			}
		}
	case api.KindNetworkPolicy:
		if name, ok := strings.CutPrefix(m.Name, controllers.PolicyNamePrefix); ok && name != "" {
			src = m.Namespace + "/" + name
		}
	}
	if src == "" {
		return
	}
	if m.Annotations == nil {
		m.Annotations = map[string]string{}
	}
	m.Annotations[controllers.OwnerAnnotation] = controllers.OwnerValue
	m.Annotations[controllers.SourceAnnotation] = src
}
