// Package netconf is the network configuration routed-cni and
// routed-ipam read from stdin (Calico's field names), the CNI_ARGS they
// take, the node name, their log file, and the request both send to
// routed's CNI socket.
//
// It is the part of the plugins that the socket-only routed-ipam links
// (cniplugin/fullbin): it must stay light, since every package it pulls
// in is initialised, and its pages faulted in, on every exec. It must
// not import cniplugin/plugin, pkg/api, net/http, the CNI invoke package
// or anything of etcd; `go list -tags cnithin -deps
// ./cniplugin/cmd/routed-ipam` shows what the executable links.
package netconf

import (
	"errors"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/routed-net/routed/pkg/datastore/dsconfig"
)

// Versions are the CNI spec versions the plugins speak; results are
// converted to the configuration's version.
var Versions = version.PluginSupports("0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0")

// IsConfig reports whether err is a configuration error (CNI code 7)
// of this package or of the datastore configuration.
func IsConfig(err error) bool {
	return errors.Is(err, ErrConfig) || errors.Is(err, dsconfig.ErrConfig)
}

// ToCNIError gives an error of this package its CNI code (7 for a
// configuration error, else 999): CNIErrorWith with IsConfig's codes.
func ToCNIError(err error) error {
	return CNIErrorWith(err, func(err error) uint {
		if IsConfig(err) {
			return types.ErrInvalidNetworkConfig
		}
		return types.ErrInternal
	})
}

// CNIErrorWith gives err the CNI code codeOf returns for it; the message
// is the whole chain, so an operator sees what failed and on what. An
// error wrapping a *types.Error (a delegated plugin's) keeps its code.
func CNIErrorWith(err error, codeOf func(error) uint) error {
	if err == nil {
		return nil
	}
	var te *types.Error
	if errors.As(err, &te) {
		if te == err {
			return te
		}
		return types.NewError(te.Code, err.Error(), te.Details)
	}
	return types.NewError(codeOf(err), err.Error(), "")
}
