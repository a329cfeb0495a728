package api

import (
	"reflect"
	"sort"
	"strings"
)

// unknownFields lists, as dotted paths, every key in obj that the Go type
// of r has no JSON field for. Reporting all of them at once saves the user
// a round trip per typo.
func unknownFields(obj map[string]any, r Resource) []string {
	var out []string
	walkUnknown(obj, reflect.TypeOf(r).Elem(), "", &out)
	sort.Strings(out)
	return out
}

func walkUnknown(v any, t reflect.Type, path string, out *[]string) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct:
		m, ok := v.(map[string]any)
		if !ok {
			return // a type mismatch is reported by json.Unmarshal
		}
		fields := jsonFields(t)
		for k, sub := range m {
			ft, ok := fields[k]
			if !ok {
				*out = append(*out, join(path, k))
				continue
			}
			walkUnknown(sub, ft, join(path, k), out)
		}
	case reflect.Slice:
		if l, ok := v.([]any); ok {
			for _, e := range l {
				walkUnknown(e, t.Elem(), path+"[]", out)
			}
		}
	}
}

// jsonFields maps JSON names to field types, flattening inline structs.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && (name == "" || strings.Contains(opts, "inline")) {
			for k, v := range jsonFields(f.Type) {
				out[k] = v
			}
			continue
		}
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
	}
	return out
}

func join(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}

var typeOfObjectMeta = reflect.TypeOf(ObjectMeta{})

func splitPath(p string) []string { return strings.Split(p, ".") }
