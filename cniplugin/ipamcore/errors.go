package ipamcore

import (
	"errors"

	"github.com/containernetworking/cni/pkg/types"
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
	case isAny(err, retryLaterErrs):
		return types.ErrTryAgainLater
	case isAny(err, configErrs):
		return types.ErrInvalidNetworkConfig
	}
	return types.ErrInternal
}

func isAny(err error, targets []error) bool {
	for _, t := range targets {
		if errors.Is(err, t) {
			return true
		}
	}
	return false
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
