package ipam

import (
	"encoding/json"
	"net/netip"
	"reflect"
)

// blockNodes is what the node feed reads of a block (DecodeBorrowed):
// the block decoded and checked as decodeBlock does, but of each
// attribute only its node; the others are checked to be strings and not
// kept. Every node decodes every changed block of the cluster (about 200
// a second under a big cluster's churn), and the attributes' handles,
// pods and namespaces were half of what a decode allocated (issue 36's
// churn profiles; BenchmarkDecodeBorrowed).
type blockNodes struct {
	block
	// Attributes hides the block's (encoding/json decodes into the
	// least nested field of a name): the block's stays empty.
	Attributes []attrNode `json:"attributes"`
}

// attrNode is an attribute of which only the node is kept.
type attrNode struct {
	Handle    jsonString `json:"handle"`
	Namespace jsonString `json:"namespace,omitempty"`
	Pod       jsonString `json:"pod,omitempty"`
	Node      string     `json:"node"`
	Type      jsonString `json:"type"`
}

// jsonString accepts what a string field accepts (a string or null) and
// keeps nothing.
type jsonString struct{}

// UnmarshalJSON implements json.Unmarshaler.
func (jsonString) UnmarshalJSON(data []byte) error {
	if len(data) > 0 && data[0] == '"' || string(data) == "null" {
		return nil
	}
	return &json.UnmarshalTypeError{Value: "non-string", Type: reflect.TypeFor[string]()}
}

// decodeBlockNodes decodes and checks a block as decodeBlock does,
// keeping only the nodes of its attributes.
func decodeBlockNodes(data []byte) (*blockNodes, error) {
	var b blockNodes
	if err := decodeChecked(data, &b, &b.block, func() int { return len(b.Attributes) }); err != nil {
		return nil, err
	}
	return &b, nil
}

// borrowed is every address allocated to a node other than the
// block's own, with that node.
func (b *blockNodes) borrowed() map[netip.Addr]string {
	owner := b.owner()
	out := map[netip.Addr]string{}
	for o, a := range b.Allocations {
		if a == nil {
			continue
		}
		if node := b.Attributes[*a].Node; node != "" && node != owner {
			out[b.addr(o)] = node
		}
	}
	return out
}
