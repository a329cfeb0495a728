package nodecond

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/routed-net/routed/routed/cnitoken"
)

// keeper is one node's condition keeper; Run's goroutine owns it.
type keeper struct {
	client *cnitoken.Client
	node   string
	log    logrus.FieldLogger
	// claimed: routed's patch has succeeded once.
	claimed bool
}

// event is one line of a watch of nodes: the object is a Node, or a
// Status for an ERROR event.
type event struct {
	Type   string          `json:"type"`
	Object json.RawMessage `json:"object"`
}

// node is what the keeper reads of a Node.
type node struct {
	Status struct {
		Conditions []Condition `json:"conditions"`
	} `json:"status"`
}

// watchOnce watches the node (a watch without a resource version starts
// with the node as it is, an ADDED event) and patches the condition
// whenever an event shows it needs it. It returns when the watch ends
// (io.EOF when the server closed it) or a patch fails; Run opens the
// next one, which starts from the node as it is again.
func (k *keeper) watchOnce(ctx context.Context) error {
	q := url.Values{"fieldSelector": {"metadata.name=" + k.node}}
	body, err := k.client.Watch(ctx, "/api/v1/nodes", q)
	if err != nil {
		return fmt.Errorf("watch Node %s: %w%s", k.node, err, hint(err, "watch on nodes"))
	}
	defer body.Close()
	dec := json.NewDecoder(body)
	for {
		var ev event
		if err := dec.Decode(&ev); err != nil {
			return err
		}
		switch ev.Type {
		case "ADDED", "MODIFIED":
		case "ERROR":
			return fmt.Errorf("watch Node %s: the API server ended it: %s", k.node, ev.Object)
		default: // DELETED, BOOKMARK: nothing to set
			continue
		}
		var n node
		if err := json.Unmarshal(ev.Object, &n); err != nil {
			return fmt.Errorf("watch Node %s: %w", k.node, err)
		}
		cur := find(n.Status.Conditions)
		if !needsPatch(cur, k.claimed) {
			k.claimed = true // routed's False is there (a restart of routed)
			continue
		}
		if err := k.patch(ctx, cur); err != nil {
			return err
		}
	}
}

// patch sets the condition False and logs what it was.
func (k *keeper) patch(ctx context.Context, cur *Condition) error {
	path := "/api/v1/nodes/" + url.PathEscape(k.node) + "/status"
	if _, err := k.client.Patch(ctx, path, "application/strategic-merge-patch+json", Patch(cur, time.Now())); err != nil {
		return fmt.Errorf("patch Node %s's NetworkUnavailable condition: %w%s", k.node, err, hint(err, "patch on nodes/status"))
	}
	k.claimed = true
	f := logrus.Fields{"was": "absent"}
	if cur != nil {
		f = logrus.Fields{"was": cur.Status, "wasReason": cur.Reason}
	}
	k.log.WithFields(f).Info("set the node's NetworkUnavailable condition False (RoutedIsUp)")
	return nil
}

// hint names the grant a forbidden request lacks.
func hint(err error, grant string) string {
	if cnitoken.StatusCode(err) == http.StatusForbidden {
		return " (routed-node's ClusterRole routed-node of deploy/routed.yaml grants " + grant + ")"
	}
	return ""
}
