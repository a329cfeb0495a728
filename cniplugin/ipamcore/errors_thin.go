//go:build cnithin

package ipamcore

// The sentinels CodeOf maps in the socket-only build, which has no
// datastore: the errors of pkg/datastore and pkg/ipam reach it only as
// the *types.Error routed sends.
var (
	retryLaterErrs = []error{ErrLock}
	configErrs     = []error{ErrConfig}
)
