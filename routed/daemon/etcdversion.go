package daemon

import (
	"context"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/routed-net/routed/pkg/datastore"
)

// etcdVersionTries bounds how often the etcd versions are asked for
// while some endpoint does not answer, etcdVersionRetry apart.
const (
	etcdVersionTries = 5
	etcdVersionRetry = 30 * time.Second
)

// checkEtcdVersions logs each etcd endpoint's version once it answers,
// as a warning when older than datastore.MinServerVersion (what such a
// server breaks is in its doc). It runs beside the start-up, not before
// it: an old etcd still serves routed, less well.
func checkEtcdVersions(ctx context.Context, ds *datastore.Client, log *logrus.Entry) {
	answered := map[string]bool{}
	for try := 1; ; try++ {
		var unknown []datastore.ServerVersion
		for _, v := range ds.ServerVersions(ctx) {
			if answered[v.Endpoint] {
				continue
			}
			if v.Err != nil {
				unknown = append(unknown, v)
				continue
			}
			answered[v.Endpoint] = true
			logEtcdVersion(log, v)
		}
		if len(unknown) == 0 {
			return
		}
		if try == etcdVersionTries {
			for _, v := range unknown {
				log.WithError(v.Err).WithField("endpoint", v.Endpoint).
					Infof("etcd's version is unknown (routed needs %s or later)", datastore.MinServerVersion)
			}
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(etcdVersionRetry):
		}
	}
}

// logEtcdVersion logs one answered endpoint's version.
func logEtcdVersion(log *logrus.Entry, v datastore.ServerVersion) {
	l := log.WithFields(logrus.Fields{"endpoint": v.Endpoint, "version": v.Version})
	if v.Old {
		l.Warnf("etcd older than %s: upgrade it. A node restarted under writes may fall behind "+
			"after its list (etcd#15220), and a watch whose progress notifications stop (etcd#17507) "+
			"fails liveness after 100 s", datastore.MinServerVersion)
		return
	}
	l.Info("etcd version")
}
