//go:build !cnithin

package ipamcore

import (
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/pkg/ipam"
)

// The sentinels CodeOf maps: etcd unreachable or too contended, or the
// host lock still busy, is 11 (retry later); configuration and requests
// no pool can serve are 7.
var (
	retryLaterErrs = []error{datastore.ErrUnavailable, ipam.ErrContention, ErrLock}
	configErrs     = []error{ErrConfig, datastore.ErrConfig, api.ErrInvalid,
		ipam.ErrNoPool, ipam.ErrNotInPool, ipam.ErrInvalidArgument}
)
