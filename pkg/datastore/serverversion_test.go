package datastore

import (
	"net"
	"strings"
	"testing"
	"time"
)

func TestOlderThanMin(t *testing.T) {
	for _, c := range []struct {
		version string
		old     bool
		bad     bool
	}{
		{"3.5.12", true, false}, {"3.5.13", false, false}, {"3.5.21", false, false},
		{"3.4.30", true, false}, {"3.6.0", false, false}, {"3.6.16", false, false},
		{"3.5.13-rc.0", true, false}, {"v3.5.12", true, false}, {"4.0.0", false, false},
		{"", false, true}, {"3.5", false, true}, {"latest", false, true},
	} {
		old, err := olderThanMin(c.version)
		if old != c.old || (err != nil) != c.bad {
			t.Errorf("olderThanMin(%q) = %v, %v; want old %v, error %v", c.version, old, err, c.old, c.bad)
		}
	}
}

// TestServerVersions: the embedded etcd (3.6) is new enough; an
// endpoint that does not answer is reported unknown, with why.
func TestServerVersions(t *testing.T) {
	c, _ := newTestClient(t)
	vs := c.ServerVersions(testCtx(t))
	if len(vs) != 1 || vs[0].Err != nil || vs[0].Old || !strings.HasPrefix(vs[0].Version, "3.6.") {
		t.Fatalf("embedded etcd: %+v", vs)
	}

	l, err := net.Listen("tcp", "127.0.0.1:0") // accepts, never answers
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	silent := connect(t, Config{Endpoints: []string{"http://" + l.Addr().String()}, RequestTimeout: 500 * time.Millisecond, DialTimeout: 500 * time.Millisecond})
	vs = silent.ServerVersions(testCtx(t))
	if len(vs) != 1 || vs[0].Err == nil || vs[0].Version != "" || !strings.Contains(vs[0].String(), "version unknown") {
		t.Fatalf("silent endpoint: %+v", vs)
	}
}
