package k8s_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/routed-net/routed/internal/testenv"
	"github.com/routed-net/routed/routed/cnitoken"
	"github.com/routed-net/routed/routed/nodecond"
	"github.com/routed-net/routed/tests/k8s/kubeapiserver"
)

// TestNodeNetworkAvailable runs routed-node's keeper of the Node
// condition NetworkUnavailable (routed/nodecond) against the real API
// server, as the routed-node account with the RBAC of
// deploy/routed.yaml: a node that calico-node's preStop hook left
// NetworkUnavailable=True (CalicoIsDown) gets False with reason
// RoutedIsUp once routed is in sync and not before, and again after
// something sets it True while routed runs (as calico-kube-controllers
// do for a node without a Ready calico-node pod); the node's other
// conditions stay exactly as they were. With a ClusterRole that lacks
// patch on nodes/status, each refused patch is logged naming the grant
// and retried.
func TestNodeNetworkAvailable(t *testing.T) {
	srv := cluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	nodeToken := applyRouted(t, srv)
	rc, err := clientcmd.RESTConfigFromKubeConfig(srv.Kubeconfig(srv.URL, srv.AdminToken))
	if err != nil {
		t.Fatal(err)
	}
	nodes := kubernetes.NewForConfigOrDie(rc).CoreV1().Nodes()
	name := "nodecond-" + randHex(3)
	if _, err := nodes.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nodes.Delete(context.Background(), name, metav1.DeleteOptions{}) })

	// The kubelet's Ready and calico-node's shutdown, as they write them.
	beat := time.Now().Add(-time.Hour).UTC().Truncate(time.Second)
	ready := corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
		Message: "kubelet is posting ready status", LastHeartbeatTime: metav1.NewTime(beat), LastTransitionTime: metav1.NewTime(beat)}
	setDown := func(reason, message string) time.Time {
		t.Helper()
		at := time.Now().UTC().Truncate(time.Second)
		patch := fmt.Sprintf(`{"status":{"conditions":[{"type":"NetworkUnavailable","status":"True","reason":%q,"message":%q,`+
			`"lastHeartbeatTime":%q,"lastTransitionTime":%q}]}}`, reason, message, at.Format(time.RFC3339), at.Format(time.RFC3339))
		if _, err := nodes.Patch(ctx, name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "status"); err != nil {
			t.Fatal(err)
		}
		return at
	}
	readyPatch := fmt.Sprintf(`{"status":{"conditions":[{"type":"Ready","status":"True","reason":%q,"message":%q,"lastHeartbeatTime":%q,"lastTransitionTime":%q}]}}`,
		ready.Reason, ready.Message, beat.Format(time.RFC3339), beat.Format(time.RFC3339))
	if _, err := nodes.Patch(ctx, name, types.StrategicMergePatchType, []byte(readyPatch), metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
	down := setDown("CalicoIsDown", "Calico is shutting down on this node")

	// conditions reads the node's two conditions; "" when they are as
	// wanted: Ready exactly as the kubelet wrote it, NetworkUnavailable
	// False by routed, its transition at or after since.
	conditions := func(since time.Time) string {
		n, err := nodes.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		var got *corev1.NodeCondition
		for i, c := range n.Status.Conditions {
			switch c.Type {
			case corev1.NodeReady:
				if c.Status != ready.Status || c.Reason != ready.Reason || c.Message != ready.Message ||
					!c.LastHeartbeatTime.Equal(&ready.LastHeartbeatTime) || !c.LastTransitionTime.Equal(&ready.LastTransitionTime) {
					t.Fatalf("Ready changed: %+v, was %+v", c, ready)
				}
			case corev1.NodeNetworkUnavailable:
				got = &n.Status.Conditions[i]
			default:
				t.Fatalf("a condition nobody wrote: %+v", c)
			}
		}
		switch {
		case len(n.Status.Conditions) != 2 || got == nil:
			return fmt.Sprintf("conditions %+v, want Ready and NetworkUnavailable", n.Status.Conditions)
		case got.Status != corev1.ConditionFalse || got.Reason != nodecond.Reason:
			return fmt.Sprintf("NetworkUnavailable %s (%s), want False (%s)", got.Status, got.Reason, nodecond.Reason)
		case got.Message != nodecond.Message || got.LastTransitionTime.Time.Before(since) || got.LastHeartbeatTime.Time.Before(since):
			return fmt.Sprintf("NetworkUnavailable False with message %q, heartbeat %s, transition %s; want %q, both at or after %s",
				got.Message, got.LastHeartbeatTime, got.LastTransitionTime, nodecond.Message, since)
		}
		return ""
	}

	// The keeper as routed-node runs it, with routed-node's token.
	var synced atomic.Bool
	var asked atomic.Int32
	stop := runNodeCond(t, srv, nodeToken, name, func() bool { asked.Add(1); return synced.Load() }, nil)

	// Not in sync yet: the keeper has asked twice and written nothing.
	testenv.Eventually(t, 10*time.Second, 50*time.Millisecond, func() string {
		if asked.Load() < 2 {
			return "the keeper has not asked whether the node is in sync twice"
		}
		return ""
	})
	if msg := conditions(down); msg == "" {
		t.Fatal("NetworkUnavailable False before the node is in sync")
	}
	synced.Store(true)
	testenv.Eventually(t, 20*time.Second, 100*time.Millisecond, func() string { return conditions(down) })
	t.Logf("in sync: False (%s) after %s's True", nodecond.Reason, "calico-node -shutdown")

	// calico-kube-controllers mark the node unavailable again while
	// routed runs: routed's watch sees it and clears it again.
	again := setDown("CalicoIsDown", "calico-node is not ready on this node")
	testenv.Eventually(t, 20*time.Second, 100*time.Millisecond, func() string { return conditions(again) })

	stop()

	// A ClusterRole without patch on nodes/status (routed-node's before
	// this keeper): each refused patch is logged with the grant it
	// lacks, and retried; the condition stays True.
	role := "nodecond-old-" + randHex(3)
	kubectlCreate(t, srv, fmt.Sprintf(`apiVersion: v1
kind: ServiceAccount
metadata: {name: %[1]s, namespace: kube-system}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: %[1]s}
rules:
- apiGroups: [""]
  resources: ["nodes"]
  verbs: ["get", "list", "watch"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: %[1]s}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: %[1]s}
subjects: [{kind: ServiceAccount, name: %[1]s, namespace: kube-system}]
`, role))
	t.Cleanup(func() {
		_, _, _ = kubectl(t, srv, "delete", "--ignore-not-found", "-n", "kube-system", "serviceaccount/"+role, "clusterrole/"+role, "clusterrolebinding/"+role)
	})
	oldToken, err := srv.ServiceAccountToken(ctx, "kube-system", role)
	if err != nil {
		t.Fatal(err)
	}
	setDown("CalicoIsDown", "Calico is shutting down on this node")
	logger, hook := logtest.NewNullLogger()
	runNodeCond(t, srv, oldToken, name, nil, logger)
	testenv.Eventually(t, 20*time.Second, 100*time.Millisecond, func() string {
		refused := 0
		for _, e := range hook.AllEntries() {
			if err, _ := e.Data[logrus.ErrorKey].(error); e.Level == logrus.WarnLevel && err != nil &&
				strings.Contains(err.Error(), "grants patch on nodes/status") && cnitoken.StatusCode(err) == http.StatusForbidden {
				refused++
			}
		}
		if refused < 2 {
			return fmt.Sprintf("%d warnings of a refused patch naming the grant, want 2 (a retry)", refused)
		}
		return ""
	})
	if msg := conditions(time.Time{}); !strings.Contains(msg, "NetworkUnavailable True") {
		t.Errorf("after refused patches: %q, want NetworkUnavailable still True", msg)
	}
}

// runNodeCond runs routed/nodecond's keeper for node with token's
// identity (log: nil for the standard logger) until the returned stop,
// or the test's end.
func runNodeCond(t *testing.T, srv *kubeapiserver.Server, token, node string, inSync func() bool, log logrus.FieldLogger) (stop func()) {
	t.Helper()
	client, err := cnitoken.NewClient(cnitoken.ClientConfig{Server: srv.URL, CAData: srv.CAPEM, Token: token})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- nodecond.Run(ctx, nodecond.Config{Client: client, Node: node, InSync: inSync,
			MinRetry: 100 * time.Millisecond, MaxRetry: time.Second, Log: log})
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("nodecond.Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}
