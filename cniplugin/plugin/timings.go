package plugin

import (
	"strconv"
	"strings"
	"sync"
	"time"
)

// procStart is when the plugin's packages were initialised: what the
// "start" step of an invocation's timings counts from (the exec and the
// Go runtime's own start come before it and are not seen here).
var procStart = time.Now()

// timings records how long each step of one invocation took, for the
// debug log line "timings" that BenchmarkAddDel (tests/cni) reads to
// break a verb's latency down. Steps are marked in order; each mark
// ends the step that began at the previous one. Etcd requests are
// recorded as they finish (request), inside whichever step they belong
// to; steps may be marked from several goroutines.
type timings struct {
	mu    sync.Mutex
	last  time.Time
	steps []string
}

func (t *timings) add(name string, d time.Duration) {
	t.steps = append(t.steps, name+"="+strconv.FormatFloat(float64(d.Microseconds())/1000, 'f', 2, 64))
}

// mark ends the current step and names it.
func (t *timings) mark(step string) {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.last.IsZero() {
		t.add(step, now.Sub(t.last))
	}
	t.last = now
}

// String lists the steps as "name=ms name=ms ...".
func (t *timings) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.Join(t.steps, " ")
}
