package datastore

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/routed-net/routed/pkg/api"
)

// ParseKey splits a resource key into its kind and name. ok is false for
// keys that are not one resource of a known kind (IPAM records, leases,
// the cluster identity).
func ParseKey(key string) (k api.Kind, name string, ok bool) {
	rest, ok := strings.CutPrefix(key, KeyPrefix)
	if !ok {
		return "", "", false
	}
	plural, name, ok := strings.Cut(rest, "/")
	if !ok || name == "" {
		return "", "", false
	}
	for _, k := range api.Kinds {
		if k.Plural() == plural {
			return k, name, true
		}
	}
	return "", "", false
}

// Decode reads a stored resource of kind k; its ResourceVersion is rev.
func Decode(k api.Kind, value []byte, rev int64) (api.Resource, error) {
	return decode(k, value, rev)
}

// DecodeClusterInfo reads the stored cluster identity.
func DecodeClusterInfo(value []byte) (*ClusterInfo, error) {
	var ci ClusterInfo
	if err := json.Unmarshal(value, &ci); err != nil {
		return nil, fmt.Errorf("datastore: corrupt cluster identity: %w", err)
	}
	return &ci, nil
}
