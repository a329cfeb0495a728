package api

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// Decoded is the result of reading a file: the resources in order, and
// warnings about Calico fields that routed accepts but does not act on.
type Decoded struct {
	Resources []Resource
	// Docs[i] says where Resources[i] came from ("document 2", "document
	// 2 item 3"), for errors found after decoding (Locate).
	Docs     []string
	Warnings []string
}

// Decode reads one or more YAML documents (separated by "---") or JSON
// objects, each a resource or a list of resources ("kind: List" or
// "<Kind>List" with items). Field names are read regardless of case, as
// calicoctl reads them. Unknown fields are an error naming them. Errors
// are *DocError, naming the document and object. Defaults are applied;
// validation is left to the caller.
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
			return nil, &DocError{Doc: where(i), Err: decodeErrorf("%v", err)}
		}
		if obj == nil {
			continue // empty document
		}
		if err := foldHeader(obj); err != nil {
			return nil, &DocError{Doc: where(i), Err: err}
		}
		stringifyMeta(doc, obj)
		if err := decodeObject(obj, where(i), out); err != nil {
			return nil, err
		}
	}
	if len(out.Resources) == 0 {
		return nil, decodeErrorf("no resources found")
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
			return nil, &DocError{Doc: fmt.Sprintf("document %d", len(docs)+1), Err: decodeErrorf("%v", err)}
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

// decodeObject decodes one object (or List) into out; its errors are
// *DocError naming where and the object.
func decodeObject(obj map[string]any, where string, out *Decoded) error {
	apiVersion, kind, err := header(obj, where)
	if err != nil {
		return err
	}
	if _, isList := listItems(obj, kind); isList {
		items, ok := obj["items"].([]any)
		if !ok && obj["items"] != nil {
			return &DocError{Doc: where, Kind: kind, Err: decodeErrorf("items must be a list")}
		}
		for j, it := range items {
			item := fmt.Sprintf("%s item %d", where, j+1)
			m, ok := it.(map[string]any)
			if !ok {
				return &DocError{Doc: item, Err: decodeErrorf("not an object")}
			}
			inheritHeader(m, apiVersion, kind)
			if err := decodeObject(m, item, out); err != nil {
				return err
			}
		}
		return nil
	}
	r, err := decodeOne(obj, apiVersion, kind, where, out)
	if err != nil {
		return locateObj(err, where, kind, obj)
	}
	out.Resources = append(out.Resources, r)
	out.Docs = append(out.Docs, where)
	return nil
}

// decodeOne decodes a single object of kind.
func decodeOne(obj map[string]any, apiVersion, kind, where string, out *Decoded) (Resource, error) {
	k := Kind(kind)
	r, err := New(k)
	if err != nil {
		return nil, fmt.Errorf("%w: kind %q is not a routed resource", ErrUnknownKind, kind)
	}
	calico := isCalico(apiVersion)
	if err := foldKeys(obj, reflect.TypeOf(r).Elem(), k, calico); err != nil {
		return nil, err
	}
	if calico {
		if k == KindWorkloadEndpoint || k == KindIPAMConfiguration {
			return nil, decodeErrorf("%s is only accepted as %s", k, APIVersion)
		}
		warnings, err := fromCalico(k, obj, where)
		if err != nil {
			return nil, err
		}
		out.Warnings = append(out.Warnings, warnings...)
		obj["apiVersion"] = APIVersion
	}
	if unknown := unknownFields(obj, r); len(unknown) > 0 {
		return nil, decodeErrorf("unknown field(s) %s", strings.Join(unknown, ", "))
	}
	raw, err := json.Marshal(obj)
	if err != nil {
		return nil, decodeErrorf("%v", err)
	}
	if err := json.Unmarshal(raw, r); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return nil, decodeErrorf("field %s: expected %s, got %s", te.Field, typeWord(te.Type), valueWord(te.Value))
		}
		return nil, decodeErrorf("%v", err)
	}
	if ns := r.Meta().Namespace; ns != "" && !k.Namespaced() {
		return nil, decodeErrorf("metadata.namespace %q: %s is not namespaced", ns, k)
	}
	r.setDefaults()
	return r, nil
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

// objLabel is how warnings name an object: "document 2 (IPPool p)".
func objLabel(where string, k Kind, obj map[string]any) string {
	md, _ := obj["metadata"].(map[string]any)
	name, _ := md["name"].(string)
	ns, _ := md["namespace"].(string)
	if n := displayName(ns, name); n != "" {
		return fmt.Sprintf("%s (%s %s)", where, k, n)
	}
	return fmt.Sprintf("%s (%s)", where, k)
}
