//go:build !cnithin

package plugin

import (
	"context"
	"net/netip"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/routed-net/routed/cniplugin/ipamcore"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/pkg/ipam"
)

// localIPAM is routed-ipam run in-process. Each verb does what the
// routed-ipam executable does for the same stdin and CNI_ARGS, and fails
// with the same code and message: the executable's own input checks are
// repeated here (ParseNetConf, CNI_ARGS and the node name were already
// checked by begin), and errors become CNI errors the way it reports
// them.
type localIPAM struct {
	c    *call
	core *ipamcore.IPAM
	// confErr is set when the ipam section is unusable; every verb then
	// fails with it, as the executable would before doing anything.
	confErr error
}

func newLocalIPAM(c *call, ds *datastore.Client) *localIPAM {
	conf, err := ipamcore.ParseConf(c.args.StdinData)
	if err != nil {
		return &localIPAM{c: c, confErr: ipamcore.CNIError(err)}
	}
	core := ipamcore.New(ds, conf, c.log.WithField("component", ipamcore.PluginName))
	core.Trace = c.tm.mark
	return &localIPAM{c: c, core: core}
}

func (l *localIPAM) add(ctx context.Context) (types.Result, error) {
	addrs, err := l.assign(ctx, nil, nil)
	if err != nil {
		return nil, err
	}
	return ipamcore.Result(addrs), nil
}

// assign is add with extra written in the assignment's transaction and
// undo in the release that follows a failed one (ipamcore.Assignment).
func (l *localIPAM) assign(ctx context.Context, extra, undo ipam.Extra) ([]netip.Addr, error) {
	if l.confErr != nil {
		return nil, l.confErr
	}
	c := l.c
	a := c.conf.Assignment(c.k8s, c.node, c.args.ContainerID)
	a.Extra, a.Undo = extra, undo
	addrs, err := l.core.Add(ctx, a)
	if err != nil {
		return nil, ipamcore.CNIError(err)
	}
	return addrs, nil
}

// releaseWith is del with extra written in the release's transaction.
func (l *localIPAM) releaseWith(ctx context.Context, extra ipam.Extra) error {
	if l.confErr != nil {
		return l.confErr
	}
	_, err := l.core.ReleaseWith(ctx, l.c.conf.Name, l.c.args.ContainerID, extra)
	return ipamcore.CNIError(err)
}

func (l *localIPAM) del(ctx context.Context) error {
	return l.release(ctx, l.c.args.ContainerID, l.c.args.IfName)
}

func (l *localIPAM) release(ctx context.Context, containerID, _ string) error {
	if l.confErr != nil {
		return l.confErr
	}
	_, err := l.core.Release(ctx, l.c.conf.Name, containerID)
	return ipamcore.CNIError(err)
}

func (l *localIPAM) check(ctx context.Context, prev *current.Result) error {
	if l.confErr != nil {
		return l.confErr
	}
	return ipamcore.CNIError(l.core.Check(ctx, l.c.conf.Name, l.c.args.ContainerID, prev))
}

func (l *localIPAM) gc(ctx context.Context) error {
	if l.confErr != nil {
		return l.confErr
	}
	return ipamcore.CNIError(l.core.GC(ctx, l.c.conf.Name, l.c.node, l.c.conf.ValidAttachments))
}

func (l *localIPAM) status(ctx context.Context) error {
	if l.confErr != nil {
		return l.confErr
	}
	if err := l.core.Status(ctx, l.c.node, l.c.conf.EtcdEndpoints); err != nil {
		return ipamcore.NotReady(err)
	}
	return nil
}

// staleReleaser needs no executable: the handle is derived from the
// container ID alone.
func (l *localIPAM) staleReleaser() (releaseFunc, error) { return l.release, nil }
