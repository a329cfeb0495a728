package demo

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/routed-net/routed/tests/k8s/cluster"
)

// routeReflectorPod turns the second node into a dedicated route
// reflector host the way deploy/rr-mode.yaml's header says, and checks
// that the reflector runs as a pod there and peers: the host is labelled
// and tainted (routed-node leaves it), its routed Node gets the
// route-reflector label and a cluster ID, rr-mode.yaml is applied (an
// overlay changing only the image; scaled to the one reflector host this
// cluster has), rr-mode-routed.yaml turns the mesh off, and the first
// node's routed reports the reflector session Established, as does the
// reflector for its client.
func routeReflectorPod(ctx context.Context, c *cluster.Cluster, root string, routedctl func(...string) (string, error), step, logf func(string, ...any)) error {
	kubectl := func(args ...string) (string, error) { return c.Kubectl(ctx, args...) }
	rrHost := c.Nodes[1].Name
	step("%s becomes a dedicated route reflector host: labelled and tainted, routed-node leaves it", rrHost)
	if _, err := kubectl("label", "node", rrHost, "routed.io/route-reflector-host=true"); err != nil {
		return err
	}
	if _, err := kubectl("taint", "node", rrHost, "routed.io/route-reflector-host=true:NoSchedule"); err != nil {
		return err
	}
	if err := cluster.WaitFor(ctx, 90*time.Second, "routed-node gone from "+rrHost, func() error {
		out, err := kubectl("-n", "kube-system", "get", "pods", "-l", "app.kubernetes.io/component=node", "--field-selector", "spec.nodeName="+rrHost, "-o", "name")
		if err == nil && strings.TrimSpace(out) != "" {
			err = fmt.Errorf("still there: %s", out)
		}
		return err
	}); err != nil {
		return err
	}

	step("the reflector's routed Node (label route-reflector, cluster ID), then kubectl apply of rr-mode.yaml")
	node := fmt.Sprintf("apiVersion: routed.io/v1\nkind: Node\nmetadata: {name: %s, labels: {route-reflector: \"true\"}}\nspec: {bgp: {routeReflectorClusterID: 224.0.0.1}}\n", rrHost)
	nodeFile := filepath.Join(os.TempDir(), fmt.Sprintf("routed-k8s-rr-node-%d.yaml", os.Getpid()))
	defer os.Remove(nodeFile)
	if err := os.WriteFile(nodeFile, []byte(node), 0o644); err != nil {
		return err
	}
	if _, err := routedctl("apply", "-f", nodeFile); err != nil {
		return err
	}
	overlay, err := rrOverlay(root, c)
	if err != nil {
		return err
	}
	defer os.RemoveAll(overlay)
	if out, err := kubectl("apply", "-k", overlay); err != nil {
		return err
	} else {
		logf("%s", out)
	}
	// rr-mode.yaml asks for two reflectors on two hosts; this cluster has
	// one reflector host, and the second replica would stay Pending.
	if _, err := kubectl("-n", "kube-system", "scale", "deployment/routed-route-reflector", "--replicas=1"); err != nil {
		return err
	}
	if out, err := kubectl("-n", "kube-system", "rollout", "status", "deployment/routed-route-reflector", "--timeout=180s"); err != nil {
		logf("reflector logs:\n%s", podLogs(ctx, c, "kube-system", "app.kubernetes.io/component=route-reflector"))
		return err
	} else {
		logf("%s", out)
	}
	out, _ := kubectl("-n", "kube-system", "get", "pods", "-l", "app.kubernetes.io/component=route-reflector", "-o", "wide")
	logf("%s", out)

	step("routedctl apply -f deploy/rr-mode-routed.yaml: mesh off, every node peers with the reflector")
	if _, err := routedctl("apply", "-f", filepath.Join(root, "deploy", "rr-mode-routed.yaml")); err != nil {
		return err
	}
	var status string
	if err := cluster.WaitFor(ctx, 90*time.Second, "the reflector session Established on "+c.Node, func() error {
		s, err := routedStatus(ctx, c, c.Node)
		status = s
		if err != nil {
			return err
		}
		if !hasRow(s, c.Nodes[1].Addr.String(), "route reflector", "Established") || strings.Contains(s, "node-to-node mesh") {
			return fmt.Errorf("not yet:\n%s", s)
		}
		return nil
	}); err != nil {
		return fmt.Errorf("%w\n%s", err, status)
	}
	logf("routedctl node status on %s:\n%s", c.Node, status)
	// The reflector reaches Established on its own side a moment after
	// its client does (the client's KEEPALIVE has to arrive first).
	var rr string
	if err := cluster.WaitFor(ctx, 30*time.Second, "the reflector reports its client "+c.NodeAddr.String()+" Established", func() error {
		var err error
		if rr, err = kubectl("-n", "kube-system", "exec", "deployment/routed-route-reflector", "-c", "routed", "--", "routedctl", "node", "status"); err != nil {
			return err
		}
		if !hasRow(rr, c.NodeAddr.String(), "Established") {
			return fmt.Errorf("not yet:\n%s", rr)
		}
		return nil
	}); err != nil {
		return err
	}
	logf("routedctl node status in the reflector pod on %s:\n%s", rrHost, rr)

	// Back to the mesh and no reflector, for the steps after: the
	// reflector's Deployment, the peering, and the reflector's routed Node
	// (while it exists, routed on the first node keeps a session
	// configured to it and is, truthfully, not ready).
	if _, err := kubectl("delete", "-k", overlay, "--wait=true"); err != nil {
		return err
	}
	if _, err := routedctl("delete", "-f", filepath.Join(root, "deploy", "rr-mode-routed.yaml")); err != nil {
		return err
	}
	if _, err := routedctl("delete", "node", rrHost); err != nil {
		return err
	}
	// And routed-node back on the host: it is a pod node again.
	if _, err := kubectl("taint", "node", rrHost, "routed.io/route-reflector-host=true:NoSchedule-"); err != nil {
		return err
	}
	if _, err := kubectl("label", "node", rrHost, "routed.io/route-reflector-host-"); err != nil {
		return err
	}
	return cluster.WaitFor(ctx, 120*time.Second, "routed-node back on "+rrHost+" and ready", func() error {
		out, err := kubectl("-n", "kube-system", "get", "ds", "routed-node", "-o", "jsonpath={.status.numberReady}/{.status.desiredNumberScheduled}")
		if err == nil && out != fmt.Sprintf("%d/%d", len(c.Nodes), len(c.Nodes)) {
			err = fmt.Errorf("ready/desired %s", out)
		}
		return err
	})
}

// hasRow reports whether a line of a status table holds every part.
func hasRow(table string, parts ...string) bool {
	for _, line := range strings.Split(table, "\n") {
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(line, p)
		}
		if ok {
			return true
		}
	}
	return false
}

// rrOverlay is deploy/rr-mode.yaml with the image reference changed and
// the reflectors' etcd Secret filled, nothing else (the file is copied: kustomize loads resources only from
// below its directory).
func rrOverlay(root string, c *cluster.Cluster) (string, error) {
	dir, err := os.MkdirTemp("", "routed-k8s-rr-overlay-")
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile(filepath.Join(root, "deploy", "rr-mode.yaml"))
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "rr-mode.yaml"), b, 0o644); err != nil {
		return "", err
	}
	secrets, err := secretPatches(c, "routed-rr-etcd-secrets")
	if err != nil {
		return "", err
	}
	name, tag, _ := strings.Cut(RoutedImage, ":")
	k := fmt.Sprintf(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- rr-mode.yaml
images:
- name: ghcr.io/routed-net/routed
  newName: %s
  newTag: %s
patches:
%s`, name, tag, secrets)
	return dir, os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644)
}
