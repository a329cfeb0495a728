package api

import (
	"fmt"
	"strings"

	"sigs.k8s.io/yaml"
)

// Ref names one resource: its kind and store name (StoreName).
type Ref struct {
	Kind Kind
	Name string
}

// DecodeRefs reads the kind and name of every resource in data (the
// same documents, Lists and apiVersions as Decode) and nothing else, as
// calicoctl delete -f does: a file holding only kind and metadata.name
// is enough, and a spec, valid or not, is not looked at.
func DecodeRefs(data []byte) ([]Ref, error) {
	docs, err := splitDocuments(data)
	if err != nil {
		return nil, err
	}
	var refs []Ref
	for i, doc := range docs {
		var obj map[string]any
		if err := yaml.Unmarshal(doc, &obj); err != nil {
			return nil, fmt.Errorf("%w: document %d: %v", ErrDecode, i+1, err)
		}
		if obj == nil {
			continue
		}
		if refs, err = appendRefs(refs, obj, fmt.Sprintf("document %d", i+1)); err != nil {
			return nil, err
		}
	}
	if len(refs) == 0 {
		return nil, fmt.Errorf("%w: no resources found", ErrDecode)
	}
	return refs, nil
}

func appendRefs(refs []Ref, obj map[string]any, where string) ([]Ref, error) {
	apiVersion, kind, err := header(obj, where)
	if err != nil {
		return nil, err
	}
	if items, ok := listItems(obj, kind); ok {
		for j, it := range items {
			m, ok := it.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("%w: %s item %d: not an object", ErrDecode, where, j+1)
			}
			inheritHeader(m, apiVersion, kind)
			if refs, err = appendRefs(refs, m, fmt.Sprintf("%s item %d", where, j+1)); err != nil {
				return nil, err
			}
		}
		return refs, nil
	}
	k, err := ParseKind(kind)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	md, _ := obj["metadata"].(map[string]any)
	name, _ := md["name"].(string)
	if name == "" {
		return nil, fmt.Errorf("%w: %s (%s): metadata.name is required", ErrDecode, where, kind)
	}
	if k.Namespaced() {
		ns, _ := md["namespace"].(string)
		if ns == "" {
			ns = "default" // as Decode defaults it
		}
		name = NamespacedName(k, ns, name)
	}
	return append(refs, Ref{Kind: k, Name: name}), nil
}

// header returns an object's apiVersion and kind, checked.
func header(obj map[string]any, where string) (apiVersion, kind string, err error) {
	apiVersion, _ = obj["apiVersion"].(string)
	kind, _ = obj["kind"].(string)
	if kind == "" {
		return "", "", fmt.Errorf("%w: %s: missing kind", ErrDecode, where)
	}
	// kubectl prints several objects as a core "v1" List whose items
	// carry their own apiVersion.
	if apiVersion == "v1" && kind == "List" {
		return apiVersion, kind, nil
	}
	if apiVersion != APIVersion && !isCalico(apiVersion) {
		return "", "", fmt.Errorf("%w: %s: apiVersion %q not supported (use %s, %s or %s)", ErrDecode, where, apiVersion, APIVersion, CalicoAPIVersion, CalicoCRDAPIVersion)
	}
	return apiVersion, kind, nil
}

// listItems returns the items of a List ("List" or "<Kind>List").
func listItems(obj map[string]any, kind string) ([]any, bool) {
	if kind != "List" && !strings.HasSuffix(kind, "List") {
		return nil, false
	}
	items, _ := obj["items"].([]any)
	return items, true
}

// inheritHeader gives a List item its List's apiVersion and kind when
// it has none.
func inheritHeader(item map[string]any, apiVersion, listKind string) {
	if _, has := item["apiVersion"]; !has {
		item["apiVersion"] = apiVersion
	}
	if _, has := item["kind"]; !has {
		item["kind"] = strings.TrimSuffix(listKind, "List")
	}
}
