package ctl

import (
	"strings"

	"github.com/routed-net/routed/pkg/api"
)

// hostEndpointColumns are calicoctl's columns for HostEndpoints (NAME,
// NODE; wide: INTERFACE, IPS, PROFILES); ok is false for other kinds.
func hostEndpointColumns(k api.Kind, wide bool) (head []string, row func(api.Resource) []string, ok bool) {
	if k != api.KindHostEndpoint {
		return nil, nil, false
	}
	return pick(wide, []string{"NAME", "NODE"}, []string{"INTERFACE", "IPS", "PROFILES"}),
		func(r api.Resource) []string {
			h := r.(*api.HostEndpoint)
			return pick(wide, []string{h.Metadata.Name, h.Spec.Node},
				[]string{dash(h.Spec.InterfaceName), dash(strings.Join(h.Spec.ExpectedIPs, ",")), dash(strings.Join(h.Spec.Profiles, ","))})
		}, true
}
