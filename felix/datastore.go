package felix

import (
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/feed"
)

// SyncKinds are the resource kinds felix takes from the node feed: what
// routes need, and the policy model (PolicyKinds).
var SyncKinds = append([]api.Kind{api.KindIPPool, api.KindNode, api.KindWorkloadEndpoint}, PolicyKinds...)

// Consumer is felix's subscription to the node feed: its resource kinds,
// every node's block affinities and every block's borrowed addresses, in
// one ordered stream.
func (f *Felix) Consumer() feed.Dispatch {
	return feed.Dispatch{Kinds: SyncKinds, Resources: f, Affinities: f, Borrowed: f}
}
