package bgp

import (
	"errors"
	"fmt"
	"github.com/routed-net/routed/internal/heartbeat"
	"sync"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"
)

// ErrConfig wraps invalid speaker configuration.
var ErrConfig = errors.New("bgp: bad configuration")

// Config holds the process-level settings of a Speaker. BGP identity and
// peers come later from confd (SetGlobal, SetPeers).
type Config struct {
	// NodeName is this node's name; affinities of other nodes are ignored.
	NodeName string
	// ListenPort overrides the configured BGP port on this process:
	// 0 uses Global.ListenPort (default 179), -1 does not listen at all
	// (sessions are then only dialled out), >0 listens there.
	ListenPort int32
	// ListenAddresses restricts the listener; empty listens on every
	// IPv4 and IPv6 address (Global.BindRouterID: on the node's own).
	ListenAddresses []string

	// RouteSink receives learned best paths; nil on a route reflector
	// that runs no felix.
	RouteSink RouteSink
	// RouteStatus answers whether felix programmed or filtered a route;
	// nil when no felix runs here.
	RouteStatus RouteStatus

	// DisableGracefulRestart turns graceful restart off: peers then drop
	// this node's routes as soon as its sessions drop.
	DisableGracefulRestart bool
	// RestartTime is how long peers keep this node's routes while it
	// restarts (default 120 s).
	RestartTime time.Duration
	// StateDir holds the marker that tells a restart from a cold start
	// (default /var/run/routed).
	StateDir string

	// InitialSyncTimeout bounds how long sessions wait for the first
	// affinity snapshot (default 10 s), so that a restarting node never
	// tells its peers "that is all my routes" before it knows them.
	InitialSyncTimeout time.Duration
	// ConnectRetry is the interval between connection attempts (default
	// 5 s); a dial times out one second before the next attempt.
	ConnectRetry time.Duration

	// Log is the parent logger (default: logrus standard logger with
	// component=bgp).
	Log *logrus.Entry
	// Beat, when set, is marked each time the programming loop goes round
	// (at least every heartbeat.Interval): the daemon's liveness reads it.
	Beat *heartbeat.Beat
}

// Defaults for Config.
const (
	DefaultRestartTime        = 120 * time.Second
	DefaultStateDir           = "/var/run/routed"
	DefaultInitialSyncTimeout = 10 * time.Second
	DefaultConnectRetry       = 5 * time.Second
)

func (c Config) withDefaults() (Config, error) {
	if c.NodeName == "" {
		return c, fmt.Errorf("%w: node name is required", ErrConfig)
	}
	if c.ListenPort < -1 || c.ListenPort > 65535 {
		return c, fmt.Errorf("%w: listen port %d: must be -1, 0 or 1-65535", ErrConfig, c.ListenPort)
	}
	if c.RestartTime == 0 {
		c.RestartTime = DefaultRestartTime
	}
	if c.RestartTime > 4095*time.Second { // 12-bit field in the capability
		c.RestartTime = 4095 * time.Second
	}
	if c.StateDir == "" {
		c.StateDir = DefaultStateDir
	}
	if c.InitialSyncTimeout == 0 {
		c.InitialSyncTimeout = DefaultInitialSyncTimeout
	}
	if c.ConnectRetry == 0 {
		c.ConnectRetry = DefaultConnectRetry
	}
	if c.ConnectRetry < 2*time.Second {
		c.ConnectRetry = 2 * time.Second
	}
	if c.Log == nil {
		c.Log = logrus.WithField("component", "bgp")
	}
	return c, nil
}

// hostHasIPv6 reports whether this kernel has IPv6 sockets, so that
// listening on "::" cannot fail on a host booted with ipv6.disable=1.
var hostHasIPv6 = sync.OnceValue(func() bool {
	fd, err := syscall.Socket(syscall.AF_INET6, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return false
	}
	_ = syscall.Close(fd)
	return true
})
