package bgp

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// restartMarker, in Config.StateDir, records when routed last stopped on
// purpose. Found young enough at the next start, it means peers still
// hold our routes: the new process then sets the Restart State bit
// (LocalRestarting) so that it defers its End-of-RIB until it has
// re-advertised everything.
const restartMarker = "bgp-restart"

func (s *Speaker) markerPath() string { return filepath.Join(s.cfg.StateDir, restartMarker) }

// detectRestart reads and removes the marker.
func (s *Speaker) detectRestart() bool {
	b, err := os.ReadFile(s.markerPath())
	if err != nil {
		return false
	}
	s.removeRestartMarker()
	ns, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return false
	}
	return time.Since(time.Unix(0, ns)) < s.cfg.RestartTime
}

// shutdownGracefully leaves the sessions up (see Run) and writes the
// marker for the next start.
func (s *Speaker) shutdownGracefully() {
	if s.cfg.DisableGracefulRestart || s.running == nil {
		return
	}
	if err := os.MkdirAll(s.cfg.StateDir, 0o700); err == nil {
		err = os.WriteFile(s.markerPath(), []byte(strconv.FormatInt(time.Now().UnixNano(), 10)+"\n"), 0o600)
		if err != nil {
			s.log.WithError(err).Warn("cannot record graceful shutdown; the next start will look like a cold start")
		}
	}
	s.log.Info("stopping without closing BGP sessions: peers keep our routes for the restart time")
}

func (s *Speaker) removeRestartMarker() { _ = os.Remove(s.markerPath()) }
