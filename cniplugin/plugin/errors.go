package plugin

import (
	"errors"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/routed-net/routed/cniplugin/netconf"
	"github.com/routed-net/routed/pkg/api"
)

// Sentinels for conditions that map to specific CNI error codes.
var (
	// errInterfaceExists: an interface the ADD would create is already
	// there (CNI code 4: CNI_IFNAME or the pod identity in CNI_ARGS names
	// an interface that belongs to something else).
	errInterfaceExists = errors.New("routed-cni: interface already exists")
	// errNetNS: CNI_NETNS is not a usable network namespace (code 8).
	errNetNS = errors.New("routed-cni: bad network namespace")
	// errNotReady: the plugin cannot serve ADD now (STATUS code 50).
	errNotReady = errors.New("routed-cni: not ready")
)

// ToCNIError gives err the CNI spec's error code (7 for a configuration
// error from ParseNetConf, ParseK8sArgs or NodeName); the message is the
// full error chain so an operator sees what failed and on what object.
// An error from a delegated plugin keeps that plugin's code.
func ToCNIError(err error) error { return toCNIError(err) }

func toCNIError(err error) error { return netconf.CNIErrorWith(err, codeOf) }

func codeOf(err error) uint {
	switch {
	// Not ready is STATUS's answer whatever made it so (an unreachable
	// datastore among them): it wraps its cause, so it is asked first.
	case errors.Is(err, errNotReady):
		return types.ErrPluginNotAvailable
	case netconf.IsConfig(err), errors.Is(err, api.ErrInvalid):
		return types.ErrInvalidNetworkConfig
	case errors.Is(err, errDatastoreUnavailable), errors.Is(err, errPolicyNotProgrammed):
		return types.ErrTryAgainLater
	case errors.Is(err, errInterfaceExists):
		return types.ErrInvalidEnvironmentVariables
	case errors.Is(err, errNetNS):
		return types.ErrInvalidNetNS
	}
	return types.ErrInternal
}
