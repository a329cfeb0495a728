//go:build !cnithin

package plugin

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/routed-net/routed/cniplugin/ipamcore"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
)

// delDirect is DEL without routed: the veth, the endpoint (if it is
// this container's), then the addresses, against etcd. With routed-ipam
// in-process the endpoint is deleted in the release's transaction, as
// routed does.
func (p *Plugin) delDirect(ctx context.Context, c *call) error {
	args, conf := c.args, c.conf
	// Deleting the container end waits for the kernel (an RCU grace
	// period: the slowest step of DEL), so the datastore connection is
	// set up and the endpoint (and with routed-ipam, the handle) read
	// meanwhile. Only reads overlap it: the endpoint and the addresses
	// are still changed after the veth is gone.
	linkDone := make(chan error, 1)
	go func() { linkDone <- delContainerLink(c) }()
	store, err := p.openStore(conf)
	var wep *api.WorkloadEndpoint
	var rev int64 // wep's, with routed-ipam in-process
	var ipam ipamBackend
	name := c.wepName()
	if err == nil {
		defer store.Close()
		c.timeStore(store)
		ipam = ipamFor(c, store)
		if l, ok := ipam.(*localIPAM); ok && l.confErr == nil {
			wep, rev, err = l.readEndpoint(ctx, name)
		} else {
			wep, err = getEndpoint(ctx, store, name)
		}
		if u, urev, ok := unreadableEndpoint(name, args.ContainerID, err); ok {
			c.log.WithError(err).Warnf("WorkloadEndpoint %s does not decode; taken as container %q's", name, u.Spec.ContainerID)
			wep, rev, err = u, urev, nil
		}
	}
	c.tm.mark("read")
	if lerr := <-linkDone; lerr != nil {
		return lerr
	}
	if err != nil {
		return err
	}
	c.tm.mark("veth")
	// The host end is ours unless the endpoint of this name now belongs to
	// a newer sandbox of the same pod, whose veth has the same name.
	ours := wep == nil || wep.Spec.ContainerID == args.ContainerID
	if ours {
		if err := delLink(c.hostVeth); err != nil {
			return err
		}
	} else {
		c.log.Infof("WorkloadEndpoint %s belongs to container %s now; leaving %s alone", name, wep.Spec.ContainerID, c.hostVeth)
	}
	if l, ok := ipam.(*localIPAM); ok && l.confErr == nil {
		if err := l.releaseWith(ctx, ipamcore.NewEndpointDel(name, args.ContainerID, rev, ours)); err != nil {
			return fmt.Errorf("IPAM plugin %s failed to release the addresses of %s and delete its WorkloadEndpoint: %w", conf.IPAM.Type, c.describe(), err)
		}
		c.tm.mark("ipam")
		return nil
	}
	if wep != nil && ours {
		if err := deleteEndpoint(ctx, store, name, wep.Metadata.ResourceVersion); err != nil {
			return err
		}
	}
	c.tm.mark("endpoint")
	if err := ipam.del(ctx); err != nil {
		return fmt.Errorf("IPAM plugin %s failed to release the addresses of %s: %w", conf.IPAM.Type, c.describe(), err)
	}
	c.tm.mark("ipam")
	return nil
}

// unreadableEndpoint stands in for an endpoint record that does not
// decode (err from reading it), for DEL: it is the DEL's container's
// only when it still names it (UnreadableEndpointIsOurs), and its
// revision is the record's, so that it is deleted only as it was read.
func unreadableEndpoint(name, containerID string, err error) (*api.WorkloadEndpoint, int64, bool) {
	var ce *datastore.CorruptError
	if !errors.As(err, &ce) || ce.Revision == 0 {
		return nil, 0, false
	}
	if !ipamcore.UnreadableEndpointIsOurs(ce.Value, containerID) {
		containerID = "(unreadable) " + api.SalvageEndpointContainer(ce.Value)
	}
	return &api.WorkloadEndpoint{
		Metadata: api.ObjectMeta{Name: name, ResourceVersion: strconv.FormatInt(ce.Revision, 10)},
		Spec:     api.WorkloadEndpointSpec{ContainerID: containerID},
	}, ce.Revision, true
}

// readEndpoint reads this attachment's endpoint and its revision (nil
// and 0 without error when there is none) together with its handle,
// which the release that follows then need not read. An unreachable
// etcd is retried as getEndpoint does.
func (l *localIPAM) readEndpoint(ctx context.Context, name string) (*api.WorkloadEndpoint, int64, error) {
	key := datastore.Key(api.KindWorkloadEndpoint, name)
	var wep *api.WorkloadEndpoint
	var rev int64
	err := datastore.RetryUnavailable(ctx, func() error {
		wep, rev = nil, 0
		kvs, err := l.core.ReadWith(ctx, l.c.conf.Name, l.c.args.ContainerID, key)
		if err != nil || kvs[0] == nil {
			return err
		}
		r, err := datastore.Decode(api.KindWorkloadEndpoint, kvs[0].Value, kvs[0].ModRevision)
		if err != nil {
			return err
		}
		var ok bool
		if wep, ok = r.(*api.WorkloadEndpoint); !ok {
			return fmt.Errorf("unexpected type %T", r)
		}
		rev = kvs[0].ModRevision
		return nil
	})
	if err != nil {
		return nil, 0, fmt.Errorf("read WorkloadEndpoint %s: %w", name, err)
	}
	return wep, rev, nil
}
