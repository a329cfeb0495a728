package api

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"
)

// calicoctl reads a document by converting it to JSON and decoding that
// with encoding/json, which matches a key to a struct field ignoring
// case: a Tier with "Order:" applies in Calico. foldKeys gives routed the
// same leniency, before the unknown-field check, by renaming each key
// that names a known field in another case to the field's own name.
//
// Only keys of structs are folded. The keys of map-valued fields (labels,
// annotations, a selector's map) are data, and case matters in them. A
// key that matches no field, in any case, is left for unknownFields to
// report. Two keys that fold to the same field ("order" and "Order") are
// an error naming both: encoding/json would silently keep one.

var jsonUnmarshaler = reflect.TypeOf((*json.Unmarshaler)(nil)).Elem()

// folder renames keys for one document.
type folder struct {
	// extra holds, per abstract path ("spec.ingress[]"), names known
	// there besides the Go type's fields: Calico fields routed reads
	// without a field of its own (calicoFields, calicoRenamed).
	extra map[string][]string
	dups  []string
}

// foldKeys folds the keys of obj to the JSON field names of t (and, for
// a Calico document of kind k, to the Calico field names routed reads).
// It returns an error naming every pair of keys that fold together.
func foldKeys(obj map[string]any, t reflect.Type, k Kind, calico bool) error {
	f := &folder{extra: map[string][]string{}}
	if calico {
		for _, cf := range calicoFields[k] {
			f.addExtra(cf.path)
		}
		for p := range calicoRenamed[k] {
			f.addExtra(p)
		}
	}
	f.walk(obj, t, "", "")
	if len(f.dups) == 0 {
		return nil
	}
	sort.Strings(f.dups)
	return decodeErrorf("%s", strings.Join(f.dups, "; "))
}

// addExtra records every segment of a dotted table path under its
// parent's abstract path.
func (f *folder) addExtra(path string) {
	parent := ""
	for _, seg := range splitPath(path) {
		name, isList := strings.CutSuffix(seg, "[]")
		f.extra[parent] = append(f.extra[parent], name)
		parent = join(parent, name)
		if isList {
			parent += "[]"
		}
	}
}

// walk folds v, which decodes into t (nil when unknown). apath is the
// abstract path ("[]" for list elements), cpath the concrete one for
// messages.
func (f *folder) walk(v any, t reflect.Type, apath, cpath string) {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t != nil && (t.Kind() == reflect.Interface || reflect.PointerTo(t).Implements(jsonUnmarshaler)) {
		t = nil // decoded by its own rules: no fields to fold to
	}
	switch val := v.(type) {
	case map[string]any:
		if t != nil && t.Kind() == reflect.Map {
			for k, sub := range val {
				f.walk(sub, t.Elem(), apath+".*", join(cpath, k))
			}
			return
		}
		var fields map[string]reflect.Type
		if t != nil && t.Kind() == reflect.Struct {
			fields = jsonFields(t)
		}
		f.foldMap(val, fields, f.extra[apath], cpath)
		for k, sub := range val {
			f.walk(sub, fields[k], join(apath, k), join(cpath, k))
		}
	case []any:
		var et reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			et = t.Elem()
		}
		for i, e := range val {
			f.walk(e, et, apath+"[]", fmt.Sprintf("%s[%d]", cpath, i))
		}
	}
}

// foldMap renames the keys of m that name a known field in another case.
func (f *folder) foldMap(m map[string]any, fields map[string]reflect.Type, extra []string, cpath string) {
	if len(fields) == 0 && len(extra) == 0 {
		return
	}
	canon := make(map[string]string, len(fields)+len(extra))
	exact := make(map[string]bool, len(fields)+len(extra))
	for name := range fields {
		canon[strings.ToLower(name)] = name
		exact[name] = true
	}
	for _, name := range extra {
		canon[strings.ToLower(name)] = name
		exact[name] = true
	}
	found := map[string][]string{}
	for k := range m {
		c, ok := k, exact[k] // an exact name is itself, as encoding/json prefers it
		if !ok {
			c, ok = canon[strings.ToLower(k)]
		}
		if ok {
			found[c] = append(found[c], k)
		}
	}
	for c, keys := range found {
		if len(keys) > 1 {
			sort.Strings(keys)
			f.dups = append(f.dups, fmt.Sprintf("%s: %s name the same field %s (field names are read regardless of case): keep one",
				join(cpath, c), quoteJoin(keys), c))
			continue
		}
		if keys[0] != c {
			m[c] = m[keys[0]]
			delete(m, keys[0])
		}
	}
}

func quoteJoin(keys []string) string {
	q := make([]string, len(keys))
	for i, k := range keys {
		q[i] = fmt.Sprintf("%q", k)
	}
	if len(q) == 2 {
		return q[0] + " and " + q[1]
	}
	return strings.Join(q[:len(q)-1], ", ") + " and " + q[len(q)-1]
}

// docHeader is what is read of every document before its kind is known.
type docHeader struct {
	APIVersion string      `json:"apiVersion"`
	Kind       string      `json:"kind"`
	Metadata   ObjectMeta  `json:"metadata"`
	Items      []docHeader `json:"items"`
}

var typeOfHeader = reflect.TypeOf(docHeader{})

// foldHeader folds apiVersion, kind, metadata (and a List's items'),
// which are read before the document's type is known.
func foldHeader(obj map[string]any) error {
	f := &folder{}
	f.walk(obj, typeOfHeader, "", "")
	if len(f.dups) == 0 {
		return nil
	}
	sort.Strings(f.dups)
	return decodeErrorf("%s", strings.Join(f.dups, "; "))
}
