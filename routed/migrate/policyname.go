package migrate

import (
	"encoding/json"
	"fmt"

	"github.com/routed-net/routed/pkg/api"
)

// calicoMetadataAnnotation is where libcalico-go keeps a resource's v3
// metadata that its storage does not hold as such; for a policy, the
// name it was given.
const calicoMetadataAnnotation = "projectcalico.org/metadata"

// tieredPolicy reports whether libcalico-go stores k under its tier's
// prefix.
func tieredPolicy(k api.Kind) bool {
	switch k {
	case api.KindGlobalNetworkPolicy, api.KindNetworkPolicy, api.KindStagedGlobalNetworkPolicy, api.KindStagedNetworkPolicy:
		return true
	}
	return false
}

// givenPolicyName is the name Calico shows a stored policy by. Since
// v3.30 libcalico-go stores every policy under its tier's prefix
// (deny-all of the default tier as "default.deny-all", on etcd and in
// custom resources alike) and keeps the name it was given in the
// projectcalico.org/metadata annotation, which its clients give back
// (model.determinePolicyName). Carrying the stored name would rename the
// policy in routed: the user's own manifest applied again would make a
// second one. Without that annotation the stored name is kept.
func givenPolicyName(stored, annotation string) (string, error) {
	if annotation == "" {
		return stored, nil
	}
	var meta struct {
		Name string `json:"name"`
	}
	if err := json.Unmarshal([]byte(annotation), &meta); err != nil {
		return "", fmt.Errorf("annotation %s is not JSON: %w", calicoMetadataAnnotation, err)
	}
	if meta.Name == "" {
		return stored, nil
	}
	return meta.Name, nil
}

// restorePolicyName gives a stored Calico v3 policy object (as decoded
// from etcd) the name Calico shows it by (givenPolicyName).
func restorePolicyName(obj map[string]any) error {
	md, _ := obj["metadata"].(map[string]any)
	if md == nil {
		return nil
	}
	stored, _ := md["name"].(string)
	ann, _ := md["annotations"].(map[string]any)
	raw, _ := ann[calicoMetadataAnnotation].(string)
	name, err := givenPolicyName(stored, raw)
	if err != nil {
		return err
	}
	md["name"] = name
	return nil
}
