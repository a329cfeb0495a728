//go:build cnithin

package plugin

import (
	"context"
	"errors"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/skel"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/routed-net/routed/cniplugin/fullbin"
)

// The socket-only build (cniplugin/fullbin): ADD and DEL through routed
// are served here; whatever needs the datastore is handed to the full
// build, routed-cni-full, which does exactly what the single binary did.

// errDatastoreUnavailable never happens without a datastore.
var errDatastoreUnavailable = errors.New("routed-cni: no datastore in this build")

// Plugin holds the plugin's collaborators; this build has no datastore.
type Plugin struct {
	// Pods reads pods; nil writes endpoints with only the identity
	// CNI_ARGS give (namespace labels and profile).
	Pods PodSource
}

// Funcs returns one function per CNI verb, for skel.PluginMainFuncs:
// ADD and DEL, which routed serves; CHECK, GC and STATUS are the full
// build's.
func (p *Plugin) Funcs() skel.CNIFuncs {
	return skel.CNIFuncs{Add: p.CmdAdd, Del: p.CmdDel, Check: handOver, GC: handOver, Status: handOver}
}

// handOver replaces this process with the full build.
func handOver(*skel.CmdArgs) error { return toCNIError(fullbin.Exec(PluginName)) }

// addDirect hands the ADD to the full build when routed does not serve
// it: nothing was changed yet.
func (p *Plugin) addDirect(_ context.Context, c *call, _, _ ns.NetNS) (*current.Result, error) {
	c.log.WithField("timings", c.tm.String()).Debugf("handing the ADD to %s%s", PluginName, fullbin.Suffix)
	return nil, fullbin.Exec(PluginName)
}

// delDirect hands the DEL to the full build when routed does not serve
// it; the container end may be gone already, which DEL tolerates.
func (p *Plugin) delDirect(_ context.Context, c *call) error {
	c.log.WithField("timings", c.tm.String()).Debugf("handing the DEL to %s%s", PluginName, fullbin.Suffix)
	return fullbin.Exec(PluginName)
}

// releaseDirect undoes routed's part of a failed ADD when routed has
// gone since, by running the full build's DEL for the attachment: the
// rollback has already removed the veth, so that DEL deletes the
// endpoint if it is this container's and releases the addresses, as the
// full build's own rollback would.
func (p *Plugin) releaseDirect(ctx context.Context, c *call, _, _ string) error {
	path, err := fullbin.Path(PluginName)
	if err != nil {
		return err
	}
	a := c.args
	return invoke.ExecPluginWithoutResult(ctx, path, a.StdinData, &invoke.Args{
		Command: "DEL", ContainerID: a.ContainerID, NetNS: a.Netns, IfName: a.IfName, PluginArgsStr: a.Args, Path: a.Path,
	}, nil)
}
