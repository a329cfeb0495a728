package daemon

import (
	"fmt"
	"path/filepath"

	"github.com/spf13/pflag"

	"github.com/routed-net/routed/pkg/datastore/listcache"
)

// bindFeedCacheFlag registers --feed-cache: where the node feed keeps its
// node-local copy of what it lists, so a restart need not list the whole
// datastore (pkg/datastore/listcache).
func (c *Config) bindFeedCacheFlag(fs *pflag.FlagSet) {
	fs.StringVar(&c.FeedCache, "feed-cache", env("", "ROUTED_FEED_CACHE"), "file in which the node feed keeps a copy of what it lists, written every few minutes and on SIGTERM, so that a restart reads only what changed since "+
		"(empty: feed-cache in --state-dir; none: off, every start lists the datastore) (env ROUTED_FEED_CACHE)")
}

// feedCache returns the feed's cache as configured; nil when off.
func (c *Config) feedCache() (*listcache.Cache, error) {
	path := c.FeedCache
	switch path {
	case "none":
		return nil, nil
	case "":
		path = filepath.Join(c.StateDir, "feed-cache")
	}
	fc, err := listcache.New(listcache.Options{Path: path})
	if err != nil {
		return nil, fmt.Errorf("--feed-cache: %w", err)
	}
	return fc, nil
}
