//go:build !cnithin

package plugin

import (
	"github.com/containernetworking/cni/pkg/skel"

	"github.com/routed-net/routed/pkg/datastore"
)

// errDatastoreUnavailable is the datastore's sentinel codeOf maps to
// code 11 (try again later).
var errDatastoreUnavailable = datastore.ErrUnavailable

// Plugin holds the plugin's collaborators; the zero value is the
// production plugin (real etcd, no Kubernetes pod source).
type Plugin struct {
	// OpenStore connects to the datastore; nil means datastore.New.
	// routed-ipam runs in-process only over a *datastore.Client; over
	// any other Store (a fake) its executable is run instead.
	OpenStore func(datastore.Config) (Store, error)
	// Pods reads pods; nil writes endpoints with only the identity
	// CNI_ARGS give (namespace labels and profile).
	Pods PodSource
}

// Funcs returns one function per CNI verb, for skel.PluginMainFuncs.
func (p *Plugin) Funcs() skel.CNIFuncs {
	return skel.CNIFuncs{Add: p.CmdAdd, Del: p.CmdDel, Check: p.CmdCheck, GC: p.CmdGC, Status: p.CmdStatus}
}

func (p *Plugin) openStore(conf *NetConf) (Store, error) {
	cfg, err := conf.DatastoreConfig()
	if err != nil {
		return nil, err
	}
	if p.OpenStore != nil {
		return p.OpenStore(cfg)
	}
	c, err := datastore.New(cfg)
	if err != nil {
		return nil, err
	}
	return c, nil
}
