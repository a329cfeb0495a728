package felix

import (
	"context"
	"slices"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/feed"
)

// SyncKinds are the resource kinds felix takes from the node feed: what
// routes need, the policy model (PolicyKinds) and the staged policies
// flow records evaluate (FlowKinds; ignored when flows are off).
var SyncKinds = append(append([]api.Kind{api.KindIPPool, api.KindNode, api.KindWorkloadEndpoint}, PolicyKinds...), FlowKinds...)

// FeedConsumer is felix's subscription to the node feed: its resource
// kinds, every node's block affinities and every block's borrowed
// addresses, in one ordered stream.
type FeedConsumer struct{ f *Felix }

// The feed finds OnBatchContext by this interface: a wrapper around
// FeedConsumer would hide it and bring back the wait for a stopped loop.
var _ feed.ContextConsumer = FeedConsumer{}

// Consumer returns felix's subscription to the node feed.
func (f *Felix) Consumer() FeedConsumer { return FeedConsumer{f} }

// Options are felix's subscription's options: a snapshot's endpoints
// undecoded (Felix.ReplaceEncoded decodes them as it goes), and the
// policy records and endpoints that do not decode (or name another
// object) reported: felix denies for them (UnreadableKinds, host and
// workload endpoints).
func (c FeedConsumer) Options() []feed.SubOption {
	return []feed.SubOption{feed.Undecoded(api.KindWorkloadEndpoint),
		feed.ReportUnreadable(append(slices.Clone(UnreadableKinds), api.KindHostEndpoint, api.KindWorkloadEndpoint)...)}
}

// SubscribedKinds is every kind felix needs from the feed.
func (c FeedConsumer) SubscribedKinds() []api.Kind { return c.f.dispatch().SubscribedKinds() }

// OnBatch implements feed.Consumer: OnBatchContext with no end.
func (c FeedConsumer) OnBatch(b feed.Batch) { c.OnBatchContext(context.Background(), b) }

// OnBatchContext implements feed.ContextConsumer. It hands b to felix's
// Run loop and returns once the loop has taken it (not programmed it):
// felix keeps no backlog of its own, so a felix behind the feed is
// behind in the feed's queue, under its limit, and a wedged loop is a
// stalled consumer there (feed.Stalled). Before Run starts and between
// Runs it waits: the next Run takes b. It gives up only when ctx (the
// feed's Run) ends, so a felix whose Run stopped first (the daemon's
// shutdown reached it before the feed) no longer keeps the feed from
// returning. It does not give up when felix's Run ends: a batch dropped
// then would be missing from the next Run's state, while one dropped
// when the feed stops is not (a feed that runs again starts from a
// snapshot).
func (c FeedConsumer) OnBatchContext(ctx context.Context, b feed.Batch) {
	select {
	case c.f.batches <- b:
	case <-ctx.Done():
	}
}

// dispatch turns a batch into the input methods' calls, in order.
func (f *Felix) dispatch() feed.Dispatch {
	return feed.Dispatch{Kinds: SyncKinds, Resources: f, Affinities: f, Borrowed: f}
}
