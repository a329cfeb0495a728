package nodecond

import (
	"encoding/json"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
)

func TestNeedsPatch(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cur     *Condition
		claimed bool
		want    bool
	}{
		{"absent, first", nil, false, true},
		{"absent, after routed's", nil, true, false},
		{"calico-node -shutdown", &Condition{Type: Type, Status: "True", Reason: "CalicoIsDown"}, true, true},
		{"calico-node -shutdown, first", &Condition{Type: Type, Status: "True", Reason: "CalicoIsDown"}, false, true},
		{"Unknown", &Condition{Type: Type, Status: "Unknown"}, true, true},
		{"calico-node's False, first", &Condition{Type: Type, Status: "False", Reason: "CalicoIsUp"}, false, true},
		{"another's False, after routed's", &Condition{Type: Type, Status: "False", Reason: "RouteCreated"}, true, false},
		{"routed's False", &Condition{Type: Type, Status: "False", Reason: Reason}, false, false},
	} {
		if got := needsPatch(tc.cur, tc.claimed); got != tc.want {
			t.Errorf("%s: needsPatch = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestPatchMergesOneCondition applies Patch as the API server does (a
// strategic merge patch of a Node's status, conditions merged by type):
// NetworkUnavailable turns False with routed's reason and times, the
// other conditions stay as they were.
func TestPatchMergesOneCondition(t *testing.T) {
	was := time.Date(2026, 11, 1, 10, 0, 0, 0, time.UTC)
	now := time.Date(2026, 11, 29, 8, 0, 5, 0, time.FixedZone("x", 3600))
	ready := corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
		Message: "kubelet is posting ready status", LastHeartbeatTime: metaTime(was), LastTransitionTime: metaTime(was)}
	for _, tc := range []struct {
		name           string
		cur            corev1.NodeCondition
		wantTransition time.Time
	}{
		{"True", corev1.NodeCondition{Type: corev1.NodeNetworkUnavailable, Status: corev1.ConditionTrue, Reason: "CalicoIsDown",
			Message: "Calico is shutting down on this node", LastTransitionTime: metaTime(was)}, now},
		{"False", corev1.NodeCondition{Type: corev1.NodeNetworkUnavailable, Status: corev1.ConditionFalse, Reason: "CalicoIsUp",
			Message: "Calico is running on this node", LastTransitionTime: metaTime(was)}, was},
	} {
		n := corev1.Node{Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{ready, tc.cur}}}
		orig, err := json.Marshal(n)
		if err != nil {
			t.Fatal(err)
		}
		cur := Condition{Type: Type, Status: string(tc.cur.Status), Reason: tc.cur.Reason,
			LastTransitionTime: tc.cur.LastTransitionTime.UTC().Format(time.RFC3339)}
		merged, err := strategicpatch.StrategicMergePatch(orig, Patch(&cur, now), corev1.Node{})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var got corev1.Node
		if err := json.Unmarshal(merged, &got); err != nil {
			t.Fatal(err)
		}
		conds := got.Status.Conditions
		if len(conds) != 2 || !conds[0].LastHeartbeatTime.Equal(&ready.LastHeartbeatTime) || conds[0].Type != ready.Type ||
			conds[0].Status != ready.Status || conds[0].Reason != ready.Reason || conds[0].Message != ready.Message {
			t.Fatalf("%s: conditions after the patch %+v, want Ready untouched and one more", tc.name, conds)
		}
		nu := conds[1]
		if nu.Type != corev1.NodeNetworkUnavailable || nu.Status != corev1.ConditionFalse || nu.Reason != Reason || nu.Message != Message ||
			!nu.LastHeartbeatTime.Time.Equal(now) || !nu.LastTransitionTime.Time.Equal(tc.wantTransition) {
			t.Errorf("%s: NetworkUnavailable after the patch %+v, want False %s heartbeat %s transition %s",
				tc.name, nu, Reason, now, tc.wantTransition)
		}
	}
}

func metaTime(t time.Time) metav1.Time { return metav1.Time{Time: t} }
