package ipamcore

import (
	"errors"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/pkg/ipam"
)

// CodeOf is the CNI error code routed-ipam reports for err: 11 when etcd
// is unreachable or too contended, or the host IPAM lock is still busy
// (retry later), 7 for configuration and
// requests no pool can serve, the code of a wrapped *types.Error, else
// 999.
func CodeOf(err error) uint {
	var te *types.Error
	switch {
	case errors.As(err, &te):
		return te.Code
	case errors.Is(err, datastore.ErrUnavailable), errors.Is(err, ipam.ErrContention), errors.Is(err, ErrLock):
		return types.ErrTryAgainLater
	case errors.Is(err, ErrConfig), errors.Is(err, datastore.ErrConfig), errors.Is(err, api.ErrInvalid),
		errors.Is(err, ipam.ErrNoPool), errors.Is(err, ipam.ErrNotInPool), errors.Is(err, ipam.ErrInvalidArgument):
		return types.ErrInvalidNetworkConfig
	}
	return types.ErrInternal
}

// CNIError is err as routed-ipam reports it to its caller: code CodeOf,
// message the whole error chain. nil stays nil.
func CNIError(err error) error {
	if err == nil {
		return nil
	}
	return types.NewError(CodeOf(err), err.Error(), "")
}

// NotReady is a Status failure as routed-ipam reports it: code 50
// (plugin not available), whatever the cause.
func NotReady(err error) error {
	return types.NewError(types.ErrPluginNotAvailable, err.Error(), "")
}
