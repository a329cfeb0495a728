package k8s_test

import (
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// object is one manifest document, decoded to JSON types.
type object map[string]any

func (o object) kind() string       { s, _ := o["kind"].(string); return s }
func (o object) apiVersion() string { s, _ := o["apiVersion"].(string); return s }
func (o object) name() string       { return str(o.get("metadata", "name")) }
func (o object) namespace() string  { return str(o.get("metadata", "namespace")) }
func (o object) id() string {
	return fmt.Sprintf("%s %s/%s/%s", o.apiVersion(), o.kind(), o.namespace(), o.name())
}

// get walks nested maps.
func (o object) get(path ...string) any {
	var cur any = map[string]any(o)
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[p]
	}
	return cur
}

func str(v any) string { s, _ := v.(string); return s }

var docSep = regexp.MustCompile(`(?m)^---[ \t]*$`)

// parseDocs splits a multi-document YAML stream and decodes every
// document that holds more than comments.
func parseDocs(t testing.TB, data []byte, what string) []object {
	t.Helper()
	var out []object
	for i, doc := range docSep.Split(string(data), -1) {
		if onlyComments(doc) {
			continue
		}
		var o object
		if err := yaml.UnmarshalStrict([]byte(doc), &o); err != nil {
			t.Fatalf("%s: document %d: %v", what, i+1, err)
		}
		out = append(out, o)
	}
	return out
}

func onlyComments(doc string) bool {
	for _, l := range strings.Split(doc, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			return false
		}
	}
	return true
}

func readDocs(t testing.TB, path string) []object {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return parseDocs(t, b, path)
}

// byID indexes objects, failing on duplicates.
func byID(t testing.TB, objs []object, what string) map[string]object {
	t.Helper()
	m := map[string]object{}
	for _, o := range objs {
		if _, dup := m[o.id()]; dup {
			t.Fatalf("%s: %s twice", what, o.id())
		}
		m[o.id()] = o
	}
	return m
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// find returns the one object of kind and name.
func find(t testing.TB, objs []object, kind, name string) object {
	t.Helper()
	for _, o := range objs {
		if o.kind() == kind && o.name() == name {
			return o
		}
	}
	t.Fatalf("no %s %s", kind, name)
	return nil
}

// podSpec returns the pod template spec of a workload.
func podSpec(o object) map[string]any {
	m, _ := o.get("spec", "template", "spec").(map[string]any)
	return m
}

// containers lists init and regular containers of a pod spec.
func containers(spec map[string]any) []map[string]any {
	var out []map[string]any
	for _, key := range []string{"initContainers", "containers"} {
		list, _ := spec[key].([]any)
		for _, c := range list {
			if m, ok := c.(map[string]any); ok {
				out = append(out, m)
			}
		}
	}
	return out
}

func list(v any) []any { l, _ := v.([]any); return l }

func asMap(v any) map[string]any { m, _ := v.(map[string]any); return m }

// isRoutedResource says whether a document is one of routed's own
// resources (routedctl), not a Kubernetes object (kubectl).
func isRoutedResource(o object) bool {
	return o.apiVersion() == "routed.io/v1" || o.apiVersion() == "projectcalico.org/v3"
}
