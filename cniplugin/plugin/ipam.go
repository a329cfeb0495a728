//go:build !cnithin

package plugin

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/routed-net/routed/cniplugin/ipamcore"
	"github.com/routed-net/routed/pkg/datastore"
)

// ipamBackend is the IPAM plugin named in ipam.type, for one invocation.
// Its errors are what that plugin's executable would return (CNI errors
// carrying its code), so callers wrap them alike whichever backend runs.
type ipamBackend interface {
	add(ctx context.Context) (types.Result, error)
	del(ctx context.Context) error
	check(ctx context.Context, prev *current.Result) error
	gc(ctx context.Context) error
	status(ctx context.Context) error
	// staleReleaser returns what releases the addresses of another
	// container of this network (GC of stale attachments). It fails
	// before GC removes anything when releasing cannot work.
	staleReleaser() (releaseFunc, error)
}

// releaseFunc releases the addresses of one container's attachment.
type releaseFunc func(ctx context.Context, containerID, ifName string) error

// ipamFor picks the IPAM backend: routed-ipam runs in-process on the
// invocation's own etcd connection (one process start-up and one
// connection per ADD/DEL instead of two); any other plugin, or
// routed-ipam over a store that is not a *datastore.Client, is executed
// from CNI_PATH as the spec describes.
func ipamFor(c *call, store Store) ipamBackend {
	if c.conf.IPAM.Type == ipamcore.PluginName {
		if ds, ok := store.(*datastore.Client); ok {
			return newLocalIPAM(c, ds)
		}
	}
	return &execIPAM{c: c}
}

// execIPAM executes the IPAM plugin with the invocation's own stdin, so
// runtimeConfig and CNI_ARGS reach it.
type execIPAM struct{ c *call }

func (e *execIPAM) add(ctx context.Context) (types.Result, error) {
	return invoke.DelegateAdd(ctx, e.c.conf.IPAM.Type, e.c.args.StdinData, nil)
}

func (e *execIPAM) del(ctx context.Context) error {
	return invoke.DelegateDel(ctx, e.c.conf.IPAM.Type, e.c.args.StdinData, nil)
}

func (e *execIPAM) check(ctx context.Context, _ *current.Result) error {
	return invoke.DelegateCheck(ctx, e.c.conf.IPAM.Type, e.c.args.StdinData, nil)
}

func (e *execIPAM) gc(ctx context.Context) error {
	return invoke.DelegateGC(ctx, e.c.conf.IPAM.Type, e.c.args.StdinData, nil)
}

func (e *execIPAM) status(ctx context.Context) error {
	return invoke.DelegateStatus(ctx, e.c.conf.IPAM.Type, e.c.args.StdinData, nil)
}

// staleReleaser runs the IPAM plugin's DEL as the stale container, which
// works for any IPAM plugin.
func (e *execIPAM) staleReleaser() (releaseFunc, error) {
	typ, args := e.c.conf.IPAM.Type, e.c.args
	path, err := invoke.FindInPath(typ, filepath.SplitList(args.Path))
	if err != nil {
		return nil, fmt.Errorf("%w: IPAM plugin %s not found in CNI_PATH %s", errConfig, typ, args.Path)
	}
	return func(ctx context.Context, containerID, ifName string) error {
		delArgs := &invoke.Args{Command: "DEL", ContainerID: containerID, IfName: ifName, Path: args.Path}
		return invoke.ExecPluginWithoutResult(ctx, path, args.StdinData, delArgs, nil)
	}, nil
}
