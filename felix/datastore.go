package felix

import (
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/feed"
)

// SyncKinds are the resource kinds felix takes from the node feed.
var SyncKinds = []api.Kind{api.KindIPPool, api.KindNode, api.KindWorkloadEndpoint}

// Consumer is felix's subscription to the node feed: its resource kinds,
// every node's block affinities and every block's borrowed addresses, in
// one ordered stream.
func (f *Felix) Consumer() feed.Dispatch {
	return feed.Dispatch{Kinds: SyncKinds, Resources: f, Affinities: f, Borrowed: f}
}
