package cni_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/routed-net/routed/internal/testenv"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/pkg/feed"
	"github.com/routed-net/routed/pkg/ipam"
	"github.com/routed-net/routed/routed/cniserver"
)

// TestMain doubles as routed's CNI service when the environment asks for
// it: tests kill and restart that process, as a node's routed restarts.
func TestMain(m *testing.M) {
	if os.Getenv(daemonEnv) != "" {
		os.Exit(runDaemon())
	}
	os.Exit(m.Run())
}

const daemonEnv = "ROUTED_TEST_CNI_DAEMON"

// runDaemon composes the CNI service as routed does (routed/daemon's
// parts.go): the server with its own watched IPAM client, subscribed to
// a node feed, until SIGTERM.
func runDaemon() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	ds, err := datastore.New(datastore.Config{Endpoints: strings.Split(os.Getenv("ETCD"), ","),
		CACertFile: os.Getenv("ETCD_CA"), CertFile: os.Getenv("ETCD_CERT"), KeyFile: os.Getenv("ETCD_KEY")})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer ds.Close()
	fd := feed.New(ds, feed.Options{})
	srv := cniserver.New(cniserver.Config{Socket: os.Getenv("SOCKET"), Node: os.Getenv("NODE"), DS: ds,
		IPAM: ipam.New(ds, ipam.WithWatchedPools())})
	fd.Subscribe("cni socket", cniserver.Kinds, srv)
	go func() { _ = fd.Run(ctx) }()
	if err := srv.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// daemon is a running CNI service process for a node.
type daemon struct {
	t   testing.TB
	cmd *exec.Cmd
}

// cniSocket is the node's routed CNI socket (its own, like its lock).
func (n *node) cniSocket() string { return filepath.Join(n.ipamDir, "run", "cni.sock") }

// startDaemon starts the node's CNI service and waits until it accepts.
func (n *node) startDaemon(t testing.TB) *daemon {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cfg := n.datastoreConfig()
	cmd.Env = append(os.Environ(), daemonEnv+"=1", "ETCD="+strings.Join(n.etcd, ","), "SOCKET="+n.cniSocket(), "NODE="+n.name,
		"ETCD_CA="+cfg.CACertFile, "ETCD_CERT="+cfg.CertFile, "ETCD_KEY="+cfg.KeyFile)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d := &daemon{t: t, cmd: cmd}
	t.Cleanup(func() { d.kill() })
	testenv.Eventually(t, 30*time.Second, 20*time.Millisecond, func() string {
		c, err := net.Dial("unix", n.cniSocket())
		if err != nil {
			return fmt.Sprintf("CNI service on %s not accepting: %v", n.cniSocket(), err)
		}
		c.Close()
		return ""
	})
	return d
}

// kill ends the process with SIGKILL (a crash: the socket file stays).
func (d *daemon) kill() {
	if d.cmd.ProcessState != nil {
		return
	}
	_ = d.cmd.Process.Kill()
	_ = d.cmd.Wait()
}

// stop ends the process with SIGTERM and waits for it.
func (d *daemon) stop() {
	if d.cmd.ProcessState != nil {
		return
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	_ = d.cmd.Wait()
}
