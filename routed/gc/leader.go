package gc

import (
	"context"
	"errors"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/client/v3/concurrency"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/routed-net/routed/internal/backoff"
	"github.com/routed-net/routed/pkg/datastore"
)

// gcElection is the etcd election that picks the one node running the
// cluster-wide GC: every GC run reads all IPAM state, so one runner keeps
// the cost flat as the cluster grows.
const gcElection = datastore.KeyPrefix + "leases/ipam-gc"

// leaseTTL bounds how long a dead leader blocks the others (seconds).
const leaseTTL = 15

// runAsLeader runs f whenever this node holds the election, and stops it
// (by cancelling its context) when the lease is lost. It returns when ctx
// ends. A lost etcd connection loses the lease after leaseTTL at most.
// f gets the election's fence: its writes made with it fail once the
// election is lost, even before f notices (a paused or partitioned
// leader cannot write over its successor).
func runAsLeader(ctx context.Context, ds *datastore.Client, election, name string, f func(context.Context, datastore.Fence)) {
	retry := backoff.New(time.Second, 30*time.Second)
	for ctx.Err() == nil {
		if err := leadOnce(ctx, ds, election, name, f); err != nil && ctx.Err() == nil {
			l := log.WithError(err).WithField("election", election)
			if permissionDenied(err) {
				// A wrong etcd identity: it would never lead.
				l.Warn("cannot run for the cluster GC election: etcd denies it (the etcd user lacks the leases prefix?); will try again")
			} else {
				l.Debug("not leading; will try again")
			}
			retry.Wait(ctx)
			continue
		}
		retry.Reset()
	}
}

func leadOnce(ctx context.Context, ds *datastore.Client, election, name string, f func(context.Context, datastore.Fence)) error {
	sess, err := concurrency.NewSession(ds.Etcd(), concurrency.WithTTL(leaseTTL), concurrency.WithContext(ctx))
	if err != nil {
		return ds.Wrap(err)
	}
	defer sess.Close()
	e := concurrency.NewElection(sess, election)
	if err := e.Campaign(ctx, name); err != nil {
		return ds.Wrap(err)
	}
	log.WithField("election", election).Info("elected: running cluster-wide IPAM GC here")
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case <-sess.Done(): // lease lost: someone else may lead now
			cancel()
		case <-stop:
		}
	}()
	defer func() { close(stop); <-watched }()
	f(lctx, datastore.Fence{Key: e.Key(), Rev: e.Rev()})
	rctx, rcancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer rcancel()
	_ = e.Resign(rctx)
	return nil
}

// permissionDenied reports whether etcd refused err's request to this
// user.
func permissionDenied(err error) bool {
	return errors.Is(err, rpctypes.ErrPermissionDenied) || errors.Is(err, rpctypes.ErrGRPCPermissionDenied) ||
		status.Code(errors.Unwrap(err)) == codes.PermissionDenied || status.Code(err) == codes.PermissionDenied
}
