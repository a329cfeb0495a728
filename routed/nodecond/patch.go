package nodecond

import (
	"encoding/json"
	"time"
)

// What routed writes into the condition.
const (
	// Type is the condition's type, Kubernetes' NodeNetworkUnavailable.
	Type = "NetworkUnavailable"
	// Reason says routed set it (calico-node's is CalicoIsUp).
	Reason = "RoutedIsUp"
	// Message is the condition's message.
	Message = "routed-node is running on this node and has programmed its network"
)

// Condition is what the keeper reads of a node condition.
type Condition struct {
	Type               string `json:"type"`
	Status             string `json:"status"`
	Reason             string `json:"reason,omitempty"`
	Message            string `json:"message,omitempty"`
	LastHeartbeatTime  string `json:"lastHeartbeatTime,omitempty"`
	LastTransitionTime string `json:"lastTransitionTime,omitempty"`
}

// find returns the condition of type Type among conds, or nil.
func find(conds []Condition) *Condition {
	for i := range conds {
		if conds[i].Type == Type {
			return &conds[i]
		}
	}
	return nil
}

// needsPatch reports whether the condition cur (nil: the node has none)
// is to be written: until routed has written it once (claimed false),
// whenever it is not already routed's False; afterwards only when it is
// not False. A False another party wrote after routed's (a cloud route
// controller's RouteCreated) is left alone, so two writers never take
// turns.
func needsPatch(cur *Condition, claimed bool) bool {
	switch {
	case cur == nil:
		return !claimed
	case cur.Status != "False":
		return true
	default:
		return !claimed && cur.Reason != Reason
	}
}

// Patch is the strategic merge patch of a Node's status that sets the
// condition False with routed's reason and message as of now. Node
// conditions merge by type, so the node's other conditions stay as they
// are. The transition time is now unless cur was already False (then
// cur's is kept: the status did not change).
func Patch(cur *Condition, now time.Time) []byte {
	ts := now.UTC().Format(time.RFC3339)
	transition := ts
	if cur != nil && cur.Status == "False" && cur.LastTransitionTime != "" {
		transition = cur.LastTransitionTime
	}
	c := Condition{Type: Type, Status: "False", Reason: Reason, Message: Message,
		LastHeartbeatTime: ts, LastTransitionTime: transition}
	b, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []Condition{c}}})
	if err != nil {
		panic(err) // strings and a fixed shape: cannot fail
	}
	return b
}
