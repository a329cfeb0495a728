package bgp

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/routed-net/routed/internal/atomicfile"
)

// restartMarker, in Config.StateDir, records when this node's BGP was
// last known alive: written when BGP runs (refreshed on every heartbeat)
// and at a planned stop, removed only when the node leaves for good
// (Stop). A process killed or crashed leaves it behind like a planned
// stop does: its peers saw the TCP session drop without a Cease and keep
// its routes, and felix's routes stay in the kernel, for the restart
// time. Found younger than the restart time at the next start, the new
// process sets the Restart State bit (LocalRestarting), so that peers
// keep its routes and it defers its End-of-RIB until it has re-advertised
// everything; without it, a peer drops the node's routes the moment the
// new session opens, and traffic to its pods is lost until they are
// advertised again.
const restartMarker = "bgp-restart"

func (s *Speaker) markerPath() string { return filepath.Join(s.cfg.StateDir, restartMarker) }

// detectRestart reads the marker: when BGP was last alive, and whether
// that is within the restart time (peers may still hold our routes).
// The marker stays: a process that never gets to run BGP (held, or
// killed again at once) leaves the same answer to the next.
func (s *Speaker) detectRestart() (alive time.Time, ok bool) {
	b, err := os.ReadFile(s.markerPath())
	if err != nil {
		return time.Time{}, false
	}
	ns, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	alive = time.Unix(0, ns)
	return alive, time.Since(alive) < s.cfg.RestartTime
}

// markAlive records that BGP runs now (see restartMarker).
func (s *Speaker) markAlive() {
	if s.cfg.DisableGracefulRestart || s.running == nil {
		return
	}
	err := os.MkdirAll(s.cfg.StateDir, 0o700)
	if err == nil {
		err = atomicfile.Write(s.markerPath(), []byte(strconv.FormatInt(time.Now().UnixNano(), 10)+"\n"), 0o600)
	}
	if err != nil && !s.markerFailed {
		s.markerFailed = true
		s.log.WithError(err).Warn("cannot record that BGP runs; a restart after a crash will look like a cold start to peers")
	}
}

// shutdownGracefully leaves the sessions up (see Run) and records the
// time for the next start.
func (s *Speaker) shutdownGracefully() {
	if s.cfg.DisableGracefulRestart || s.running == nil {
		return
	}
	s.markAlive()
	s.log.Info("stopping without closing BGP sessions: peers keep our routes for the restart time")
}

func (s *Speaker) removeRestartMarker() { _ = os.Remove(s.markerPath()) }
