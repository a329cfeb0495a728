package felix

import (
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
)

// SyncKinds are the resource kinds felix needs from datastore.Sync.
var SyncKinds = []api.Kind{api.KindIPPool, api.KindNode, api.KindWorkloadEndpoint}

var _ datastore.Handler = (*Felix)(nil)

// OnSnapshot implements datastore.Handler: pass a Felix straight to
// (*datastore.Client).Sync(ctx, felix.SyncKinds, f).
func (f *Felix) OnSnapshot(s datastore.Snapshot) { f.ReplaceResources(s.Resources) }

// OnEvent implements datastore.Handler.
func (f *Felix) OnEvent(e datastore.Event) {
	if e.Type == datastore.EventDelete {
		f.DeleteResource(e.Kind, e.Name)
		return
	}
	if e.Resource != nil {
		f.SetResource(e.Resource)
	}
}
