package daemon

import (
	"context"
	"os"

	"github.com/routed-net/routed/internal/supervise"
	"github.com/routed-net/routed/routed/cnitoken"
	"github.com/routed-net/routed/routed/nodecond"
)

// startNodeCondition runs the keeper of the Kubernetes Node's
// NetworkUnavailable condition (routed/nodecond) under g when routed
// runs in a pod with API access: False once the node is in sync, and
// again whenever something sets it True (calico-node's preStop hook,
// calico-kube-controllers, a cloud route controller). Outside a
// Kubernetes cluster there is no Node to keep.
func startNodeCondition(g *supervise.Group, cfg Config, inSync func() bool) {
	l := log.WithField("component", "nodecond")
	if why := nodeConditionOff(cfg); why != "" {
		l.Info("the Node's NetworkUnavailable condition is not kept: " + why)
		return
	}
	client, err := cnitoken.InClusterClient()
	if err != nil {
		l.WithError(err).Warn("the Node's NetworkUnavailable condition is not kept: clear it with kubectl if it is True")
		return
	}
	g.Go("node condition", supervise.Restart, func(ctx context.Context) error {
		return nodecond.Run(ctx, nodecond.Config{Client: client, Node: cfg.NodeName, InSync: inSync, Log: l})
	})
}

// nodeConditionOff says why the condition keeper does not run, "" when
// it does.
func nodeConditionOff(cfg Config) string {
	switch {
	case !cfg.NodeCondition:
		return "--node-condition=false"
	case os.Getenv("KUBERNETES_SERVICE_HOST") == "":
		return "not in a Kubernetes pod"
	}
	return ""
}
