package datastore

import (
	"context"
	"fmt"
	"strings"

	"github.com/coreos/go-semver/semver"
)

// MinServerVersion is the oldest etcd routed's watch relies on. Before
// it, a server could answer a progress request ahead of the events a
// watch was still replaying (etcd#15220), or stop answering progress
// requests (etcd#17507). A node asks for progress after a list made
// while etcd moved on, to hand over its snapshot once caught up, and
// every 30 s for its liveness: on an older server a restarted node's
// snapshot can be followed by a backlog, and a watch whose progress
// stops is taken for stuck.
const MinServerVersion = "3.5.13"

// ServerVersion is what one endpoint said of its etcd version.
type ServerVersion struct {
	Endpoint string
	// Version is the server's, "" when it did not answer.
	Version string
	// Err is why the version is unknown.
	Err error
	// Old: Version is older than MinServerVersion.
	Old bool
}

func (v ServerVersion) String() string {
	switch {
	case v.Err != nil:
		return fmt.Sprintf("%s: version unknown: %v", v.Endpoint, v.Err)
	case v.Old:
		return fmt.Sprintf("%s: etcd %s, older than %s", v.Endpoint, v.Version, MinServerVersion)
	}
	return fmt.Sprintf("%s: etcd %s", v.Endpoint, v.Version)
}

// ServerVersions asks every endpoint for its etcd version (maintenance
// Status, which any authenticated user may call since etcd 3.5; an older
// server may refuse it to a user without the root role).
func (c *Client) ServerVersions(ctx context.Context) []ServerVersion {
	out := make([]ServerVersion, 0, len(c.cfg.Endpoints))
	for _, ep := range c.cfg.Endpoints {
		v := ServerVersion{Endpoint: ep}
		cctx, cancel := c.Ctx(ctx)
		resp, err := c.etcd.Status(cctx, ep)
		cancel()
		if err != nil {
			v.Err = c.wrap(err)
		} else {
			v.Version = resp.Version
			v.Old, v.Err = olderThanMin(resp.Version)
		}
		out = append(out, v)
	}
	return out
}

// olderThanMin reports whether version (etcd's "3.5.12", perhaps with a
// pre-release suffix) is older than MinServerVersion.
func olderThanMin(version string) (bool, error) {
	v, err := semver.NewVersion(strings.TrimPrefix(version, "v"))
	if err != nil {
		return false, fmt.Errorf("unreadable version %q: %w", version, err)
	}
	return v.LessThan(*semver.New(MinServerVersion)), nil
}
