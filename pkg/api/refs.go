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
	refs, _, err := DecodeRefsDocs(data)
	return refs, err
}

// DecodeRefsDocs is DecodeRefs that also says where each Ref came from
// ("document 2", "document 2 item 3"), for errors about it (Locate).
func DecodeRefsDocs(data []byte) ([]Ref, []string, error) {
	docs, err := splitDocuments(data)
	if err != nil {
		return nil, nil, err
	}
	var refs []Ref
	var where []string
	for i, doc := range docs {
		var obj map[string]any
		if err := yaml.Unmarshal(doc, &obj); err != nil {
			return nil, nil, &DocError{Doc: fmt.Sprintf("document %d", i+1), Err: decodeErrorf("%v", err)}
		}
		if obj == nil {
			continue
		}
		if err := foldHeader(obj); err != nil {
			return nil, nil, &DocError{Doc: fmt.Sprintf("document %d", i+1), Err: err}
		}
		n := len(refs)
		if refs, err = appendRefs(refs, obj, fmt.Sprintf("document %d", i+1)); err != nil {
			return nil, nil, err
		}
		for j := n; j < len(refs); j++ {
			w := fmt.Sprintf("document %d", i+1)
			if _, isList := listItems(obj, fmt.Sprint(obj["kind"])); isList {
				w = fmt.Sprintf("%s item %d", w, j-n+1)
			}
			where = append(where, w)
		}
	}
	if len(refs) == 0 {
		return nil, nil, decodeErrorf("no resources found")
	}
	return refs, where, nil
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
				return nil, &DocError{Doc: fmt.Sprintf("%s item %d", where, j+1), Err: decodeErrorf("not an object")}
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
		return nil, &DocError{Doc: where, Err: err}
	}
	md, _ := obj["metadata"].(map[string]any)
	name, _ := md["name"].(string)
	if name == "" {
		return nil, &DocError{Doc: where, Kind: kind, Err: decodeErrorf("metadata.name is required")}
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
		return "", "", &DocError{Doc: where, Err: decodeErrorf("missing kind")}
	}
	// kubectl prints several objects as a core "v1" List whose items
	// carry their own apiVersion.
	if apiVersion == "v1" && kind == "List" {
		return apiVersion, kind, nil
	}
	if apiVersion != APIVersion && !isCalico(apiVersion) {
		return "", "", &DocError{Doc: where, Kind: kind, Err: decodeErrorf("apiVersion %q not supported (use %s, %s or %s)", apiVersion, APIVersion, CalicoAPIVersion, CalicoCRDAPIVersion)}
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
