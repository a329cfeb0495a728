package daemon

import (
	"testing"

	"github.com/spf13/pflag"
)

// TestFeedCacheFlag: on by default, in the state directory; off with
// "none"; elsewhere when given a path.
func TestFeedCacheFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // "": off
	}{
		{nil, "/var/lib/routed-test/feed-cache"},
		{[]string{"--feed-cache", "none"}, ""},
		{[]string{"--feed-cache", "/tmp/x/cache"}, "/tmp/x/cache"},
	} {
		var c Config
		fs := pflag.NewFlagSet("routed", pflag.ContinueOnError)
		c.BindFlags(fs)
		if err := fs.Parse(append([]string{"--state-dir", "/var/lib/routed-test"}, tc.args...)); err != nil {
			t.Fatal(err)
		}
		fc, err := c.feedCache()
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		got := ""
		if fc != nil {
			got = fc.Path()
		}
		if got != tc.want {
			t.Fatalf("%v: cache at %q, want %q", tc.args, got, tc.want)
		}
	}
}
