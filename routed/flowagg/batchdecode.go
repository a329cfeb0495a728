package flowagg

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"

	"github.com/routed-net/routed/felix/policy/flowrec"
)

// Bounds on one POST of a batch, checked while it is read: a batch is
// decoded as a stream and refused (413) as soon as it passes one, so a
// sender cannot make the aggregator hold more than MaxBatchBytes of
// body or MaxBatchFlows decoded flows per request.
const (
	// MaxBatchFlows is the flows one batch may carry: a node's
	// collector puts at most its group cap (flowrec.DefaultMaxGroups)
	// in an interval's batch.
	MaxBatchFlows = flowrec.DefaultMaxGroups
	// MaxBatchBytes is the largest batch body; the sender splits
	// larger batches (and again on 413).
	MaxBatchBytes = 8 << 20
	// MaxConcurrentBatches is how many batch requests are decoded at
	// once; more are answered 503 and the sender retries.
	MaxConcurrentBatches = 4
)

// errBatchTooLarge is a batch past MaxBatchFlows or MaxBatchBytes.
var errBatchTooLarge = errors.New("flowagg: batch too large")

// dns1123 is a Kubernetes object name (RFC 1123 subdomain): node, pod
// and namespace names are this, and nothing else is printed by readers.
var dns1123 = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)

// validName reports whether s is a DNS-1123 subdomain of at most 253.
func validName(s string) bool { return len(s) <= 253 && dns1123.MatchString(s) }

// decodeBatch reads one batch object from r as a stream: the flows
// array element by element, refusing the MaxBatchFlows+1st with
// errBatchTooLarge. Unknown top-level fields are refused.
func decodeBatch(r io.Reader, b *flowrec.Batch) error {
	dec := json.NewDecoder(r)
	if err := expectDelim(dec, '{'); err != nil {
		return err
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key, _ := tok.(string)
		var v any
		switch key {
		case "node":
			v = &b.Node
		case "boot":
			v = &b.Boot
		case "seq":
			v = &b.Seq
		case "start":
			v = &b.Start
		case "end":
			v = &b.End
		case "part":
			v = &b.Part
		case "dropped":
			v = &b.Dropped
		case "flows":
			if err := decodeFlows(dec, b); err != nil {
				return err
			}
			continue
		default:
			return fmt.Errorf("unknown field %q", key)
		}
		if err := dec.Decode(v); err != nil {
			return fmt.Errorf("field %q: %w", key, err)
		}
	}
	if err := expectDelim(dec, '}'); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("data after the batch object")
	}
	return nil
}

func decodeFlows(dec *json.Decoder, b *flowrec.Batch) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if tok == nil {
		return nil // "flows": null
	}
	if d, ok := tok.(json.Delim); !ok || d != '[' {
		return fmt.Errorf("field \"flows\": not an array")
	}
	for dec.More() {
		if len(b.Flows) >= MaxBatchFlows {
			return fmt.Errorf("%w: more than %d flows", errBatchTooLarge, MaxBatchFlows)
		}
		var f flowrec.Flow
		if err := dec.Decode(&f); err != nil {
			return fmt.Errorf("flow %d: %w", len(b.Flows), err)
		}
		b.Flows = append(b.Flows, f)
	}
	return expectDelim(dec, ']')
}

func expectDelim(dec *json.Decoder, want json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != want {
		return fmt.Errorf("want %q, got %v", want, tok)
	}
	return nil
}
