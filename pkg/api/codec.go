package api

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// Decoded is the result of reading a file: the resources in order, and
// warnings about Calico fields that routed accepts but does not act on.
type Decoded struct {
	Resources []Resource
	Warnings  []string
}

// Decode reads one or more YAML documents (separated by "---") or JSON
// objects, each a resource or a list of resources ("kind: List" or
// "<Kind>List" with items). Unknown fields are an error naming them.
// Defaults are applied; validation is left to the caller.
func Decode(data []byte) (*Decoded, error) {
	return decode(data, func(i int) string { return fmt.Sprintf("document %d", i+1) })
}

// DecodeSource is Decode for data read from one named place (a datastore
// key): errors and warnings name source instead of "document N".
func DecodeSource(data []byte, source string) (*Decoded, error) {
	return decode(data, func(int) string { return source })
}

func decode(data []byte, where func(i int) string) (*Decoded, error) {
	out := &Decoded{}
	docs, err := splitDocuments(data)
	if err != nil {
		return nil, err
	}
	for i, doc := range docs {
		var obj map[string]any
		if err := yaml.Unmarshal(doc, &obj); err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrDecode, where(i), err)
		}
		if obj == nil {
			continue // empty document
		}
		stringifyMeta(doc, obj)
		if err := decodeObject(obj, where(i), out); err != nil {
			return nil, err
		}
	}
	if len(out.Resources) == 0 {
		return nil, fmt.Errorf("%w: no resources found", ErrDecode)
	}
	return out, nil
}

// metaMaps is what stringifyMeta reads with typed string maps.
type metaMaps struct {
	Metadata *struct {
		Labels      map[string]string `json:"labels"`
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
	Items []metaMaps `json:"items"`
}

// stringifyMeta replaces obj's labels and annotations (and its List
// items') with doc's read into typed string maps, as calicoctl and
// kubectl read them: an unquoted scalar (true, yes, 1) is its string
// form rather than an error. Where the typed read fails (a list as a
// value), obj is left for decodeObject to report.
func stringifyMeta(doc []byte, obj map[string]any) {
	var typed metaMaps
	if yaml.Unmarshal(doc, &typed) != nil {
		return
	}
	typed.apply(obj)
}

func (t metaMaps) apply(obj map[string]any) {
	if meta, ok := obj["metadata"].(map[string]any); ok && t.Metadata != nil {
		if t.Metadata.Labels != nil {
			meta["labels"] = anyMap(t.Metadata.Labels)
		}
		if t.Metadata.Annotations != nil {
			meta["annotations"] = anyMap(t.Metadata.Annotations)
		}
	}
	items, _ := obj["items"].([]any)
	for i, it := range items {
		if m, ok := it.(map[string]any); ok && i < len(t.Items) {
			t.Items[i].apply(m)
		}
	}
}

// anyMap gives m the shape generic decoding gives maps.
func anyMap(m map[string]string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// splitDocuments splits YAML into its documents, and a JSON stream into
// its objects. The YAML parser reads only the first document of what it
// is given and silently drops the rest, so every separator must be found
// here: a "---" line, optionally followed by a comment, as kubectl reads
// them (content after "---" on the same line is an error).
func splitDocuments(data []byte) ([][]byte, error) {
	if docs, ok := splitJSON(data); ok {
		return docs, nil
	}
	var docs [][]byte
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%w: document %d: %v", ErrDecode, len(docs)+1, err)
		}
		docs = append(docs, doc)
	}
}

// splitJSON splits a stream of JSON objects ({...} {...}); ok is false if
// data is not entirely such a stream, and it is then read as YAML.
func splitJSON(data []byte) ([][]byte, bool) {
	data = bytes.TrimSpace(data)
	if len(data) == 0 || data[0] != '{' {
		return nil, false
	}
	var docs [][]byte
	dec := json.NewDecoder(bytes.NewReader(data))
	for {
		var doc json.RawMessage
		if err := dec.Decode(&doc); err == io.EOF {
			return docs, true
		} else if err != nil {
			return nil, false
		}
		docs = append(docs, doc)
	}
}

func decodeObject(obj map[string]any, where string, out *Decoded) error {
	apiVersion, kind, err := header(obj, where)
	if err != nil {
		return err
	}
	if _, isList := listItems(obj, kind); isList {
		items, ok := obj["items"].([]any)
		if !ok && obj["items"] != nil {
			return fmt.Errorf("%w: %s: items must be a list", ErrDecode, where)
		}
		for j, it := range items {
			m, ok := it.(map[string]any)
			if !ok {
				return fmt.Errorf("%w: %s item %d: not an object", ErrDecode, where, j+1)
			}
			inheritHeader(m, apiVersion, kind)
			if err := decodeObject(m, fmt.Sprintf("%s item %d", where, j+1), out); err != nil {
				return err
			}
		}
		return nil
	}
	k := Kind(kind)
	r, err := New(k)
	if err != nil {
		return fmt.Errorf("%w: %s: kind %q is not a routed resource", ErrUnknownKind, where, kind)
	}
	if isCalico(apiVersion) {
		if k == KindWorkloadEndpoint || k == KindIPAMConfiguration {
			return fmt.Errorf("%w: %s: %s is only accepted as %s", ErrDecode, where, k, APIVersion)
		}
		warnings, err := fromCalico(k, obj, where)
		if err != nil {
			return err
		}
		out.Warnings = append(out.Warnings, warnings...)
		obj["apiVersion"] = APIVersion
	}
	if unknown := unknownFields(obj, r); len(unknown) > 0 {
		return fmt.Errorf("%w: %s (%s): unknown field(s) %s", ErrDecode, where, kind, strings.Join(unknown, ", "))
	}
	raw, err := json.Marshal(obj)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrDecode, where, err)
	}
	if err := json.Unmarshal(raw, r); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return fmt.Errorf("%w: %s (%s): field %s: expected %s, got %s", ErrDecode, where, kind, te.Field, te.Type, te.Value)
		}
		return fmt.Errorf("%w: %s (%s): %v", ErrDecode, where, kind, err)
	}
	if ns := r.Meta().Namespace; ns != "" && !k.Namespaced() {
		return fmt.Errorf("%w: %s (%s): metadata.namespace %q: %s is not namespaced", ErrDecode, where, kind, ns, k)
	}
	r.setDefaults()
	out.Resources = append(out.Resources, r)
	return nil
}

// Encode writes resources as YAML or JSON. One resource is written as
// itself; several (or asList) as a List that Decode reads back.
func Encode(w io.Writer, rs []Resource, format string, asList bool) error {
	var v any = rs
	if len(rs) == 1 && !asList {
		v = rs[0]
	} else {
		if rs == nil {
			rs = []Resource{}
		}
		v = map[string]any{"apiVersion": APIVersion, "kind": "List", "items": rs}
	}
	switch format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	case "yaml":
		b, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
	return fmt.Errorf("unknown output format %q (use yaml or json)", format)
}
