package datastore

import (
	"time"

	"github.com/routed-net/routed/pkg/api"
)

// Encode returns the key and stored value of r (defaults applied,
// validated, creation time set when missing), for callers that write it
// inside a transaction of their own: routed's CNI service writes a
// WorkloadEndpoint in the same transaction as its IPAM allocation.
// Resources whose writes carry guards (IP pools, policies) must go
// through Create or Update instead.
func Encode(r api.Resource) (key string, value []byte, err error) {
	if r.Meta().CreationTimestamp == "" {
		r.Meta().CreationTimestamp = time.Now().UTC().Format(time.RFC3339)
	}
	b, err := prepare(r)
	if err != nil {
		return "", nil, err
	}
	return Key(r.GetKind(), api.StoreName(r)), b, nil
}
