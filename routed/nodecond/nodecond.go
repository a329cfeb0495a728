// Package nodecond keeps this node's Kubernetes condition
// NetworkUnavailable False while routed-node runs, as calico-node does
// for Calico (reason CalicoIsUp). Kubernetes taints a node whose
// condition is True (node.kubernetes.io/network-unavailable:NoSchedule)
// and schedules no new pod there. It is set True by calico-node's
// preStop hook (`calico-node -shutdown`) as Calico leaves a node, by
// newer calico-kube-controllers for a node without a Ready calico-node
// pod, and at registration by the cloud route controller of some
// clouds: whichever network plugin owns the node is expected to clear
// it.
//
// The keeper waits until the node is in sync (the feed listed, felix
// programmed the dataplane), then watches its own Node object (one
// object, by field selector: one open watch a node, no polling) and
// patches the status with a strategic merge patch that touches that
// one condition: once, to say routed owns it, and again whenever the
// condition is seen other than False afterwards. A failure is logged
// and retried with backoff; it never stops routed.
package nodecond

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/routed-net/routed/internal/backoff"
	"github.com/routed-net/routed/internal/supervise"
	"github.com/routed-net/routed/routed/cnitoken"
)

// ErrConfig: the keeper cannot start as configured.
var ErrConfig = errors.New("nodecond: configuration")

// Config says whose condition to keep and with what.
type Config struct {
	// Client is routed's access to the API server (routed-node's
	// ServiceAccount, which needs patch on nodes/status and watch on
	// nodes).
	Client *cnitoken.Client
	// Node is the Kubernetes Node's name (routed's node name).
	Node string
	// InSync reports whether the node's network is programmed; nothing
	// is written before it first returns true. Nil: from the start.
	InSync func() bool
	// MinRetry and MaxRetry bound the backoff after a failure.
	MinRetry, MaxRetry time.Duration
	// Log receives one line per change and per failure.
	Log logrus.FieldLogger
}

// Run keeps the condition until ctx ends. It returns nil when ctx
// ends, an error only for a bad Config.
func Run(ctx context.Context, c Config) error {
	if c.Client == nil || c.Node == "" {
		return fmt.Errorf("%w: a client and a node name are required", ErrConfig)
	}
	c.MinRetry, c.MaxRetry = cmp.Or(c.MinRetry, time.Second), cmp.Or(c.MaxRetry, time.Minute)
	if c.Log == nil {
		c.Log = logrus.WithField("component", "nodecond")
	}
	log := c.Log.WithField("node", c.Node)
	if !supervise.Until(ctx, 500*time.Millisecond, c.InSync) {
		return nil
	}
	k := keeper{client: c.Client, node: c.Node, log: log}
	failures := backoff.New(c.MinRetry, c.MaxRetry)
	for ctx.Err() == nil {
		began := time.Now()
		err := k.watchOnce(ctx)
		if ctx.Err() != nil {
			break
		}
		// A watch that lasted (the API server ends them after tens of
		// minutes) was a success: the next opens after the floor delay.
		if time.Since(began) > c.MaxRetry {
			failures.Reset()
		}
		wait := failures.Next()
		switch {
		case errors.Is(err, io.EOF):
			log.WithField("retryIn", wait).Debug("Node watch ended; watching again")
		default:
			log.WithError(err).WithField("retryIn", wait).Warn("cannot keep the node's NetworkUnavailable condition False; retrying")
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
	return nil
}
