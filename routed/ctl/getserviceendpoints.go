package ctl

import (
	"slices"
	"strconv"
	"strings"

	"github.com/routed-net/routed/pkg/api"
)

// serviceEndpointsColumns are the columns of the controllers'
// ServiceEndpoints records (NAMESPACE, NAME, ENDPOINTS, PORTS; wide:
// ADDRESSES); ok is false for other kinds.
func serviceEndpointsColumns(k api.Kind, wide bool) (head []string, row func(api.Resource) []string, ok bool) {
	if k != api.KindServiceEndpoints {
		return nil, nil, false
	}
	return pick(wide, []string{"NAMESPACE", "NAME", "ENDPOINTS", "PORTS"}, []string{"ADDRESSES"}),
		func(r api.Resource) []string {
			s := r.(*api.ServiceEndpoints)
			var addrs, ports []string
			for _, sub := range s.Spec.Subsets {
				addrs = append(addrs, sub.Addresses...)
				for _, p := range sub.Ports {
					if pp := p.Protocol.String() + "/" + strconv.Itoa(int(p.Port)); !slices.Contains(ports, pp) {
						ports = append(ports, pp)
					}
				}
			}
			return pick(wide, []string{s.Metadata.Namespace, s.Metadata.Name, strconv.Itoa(len(addrs)), dash(strings.Join(ports, ","))},
				[]string{dash(strings.Join(addrs, ","))})
		}, true
}
