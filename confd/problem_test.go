package confd

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/routed-net/routed/internal/dstest"
	"github.com/routed-net/routed/pkg/feed"
)

// problemSpeaker is a fakeSpeaker that also hears confd's problem.
type problemSpeaker struct {
	*fakeSpeaker
	pmu     sync.Mutex
	problem []string // every value set, in order
}

func (p *problemSpeaker) SetConfigProblem(s string) {
	p.pmu.Lock()
	p.problem = append(p.problem, s)
	p.pmu.Unlock()
}

func (p *problemSpeaker) last() (string, int) {
	p.pmu.Lock()
	defer p.pmu.Unlock()
	if len(p.problem) == 0 {
		return "", 0
	}
	return p.problem[len(p.problem)-1], len(p.problem)
}

// TestConfdTellsTheSpeakerItsProblem: a node with no Node resource
// cannot be configured; confd says why to the speaker (whose status
// shows it: routedctl node status used to say the sessions were not
// read "yet", forever), and clears it once the Node exists and the
// sessions are set. Real etcd and feed.
func TestConfdTellsTheSpeakerItsProblem(t *testing.T) {
	t.Parallel()
	ds := dstest.Client(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if _, err := ds.Apply(ctx, node("b", "10.0.0.2/24", 0, "")); err != nil {
		t.Fatal(err)
	}
	sp := &problemSpeaker{fakeSpeaker: newFakeSpeaker()}
	cd := New(sp, "a")
	fd := feed.New(ds, feed.Options{})
	fd.Subscribe("confd", Kinds, cd.Consumer())
	go func() { _ = fd.Run(ctx) }()
	go func() { _ = cd.Run(ctx) }()

	sp.waitFor(t, "a problem naming node a", func() bool {
		p, _ := sp.last()
		return strings.Contains(p, `"a"`)
	})
	if _, err := ds.Apply(ctx, node("a", "10.0.0.1/24", 0, "")); err != nil {
		t.Fatal(err)
	}
	sp.waitFor(t, "the problem cleared and the mesh peer b set", func() bool {
		p, n := sp.last()
		return n >= 2 && p == "" && len(sp.peers) == 1 && sp.peers[0].Name == "b"
	})
}
