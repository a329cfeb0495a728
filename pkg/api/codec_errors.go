package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
)

// DocError is an error in one document of a file: it names the file
// (when the caller knows it), the document ("document 2", "document 2
// item 3", or the datastore key it was read from) and the object, so an
// operator applying several files finds the line to fix:
//
//	b.yaml: document 2 (NetworkPolicy default/x): spec.ingress[0].action: ...
type DocError struct {
	File string // empty when the data had no file (standard input is "-")
	Doc  string
	Kind string // empty when the document has none
	Name string // "name" or "namespace/name"; empty when it has none
	Err  error
}

// Error implements error.
func (e *DocError) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		b.WriteString(": ")
	}
	b.WriteString(e.Doc)
	switch {
	case e.Kind != "" && e.Name != "":
		fmt.Fprintf(&b, " (%s %s)", e.Kind, e.Name)
	case e.Kind != "":
		fmt.Fprintf(&b, " (%s)", e.Kind)
	}
	b.WriteString(": ")
	var ve *ValidationError
	if errors.As(e.Err, &ve) {
		// The document already names the object: only the fields.
		b.WriteString(ve.fieldsText())
	} else {
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap makes errors.Is see ErrDecode, ErrInvalid or the datastore's
// errors through a DocError.
func (e *DocError) Unwrap() error { return e.Err }

// Locate returns err located in doc of file for r; an error that is
// already a *DocError only gains the file name.
func Locate(err error, file, doc string, r Resource) error {
	if err == nil {
		return nil
	}
	var de *DocError
	if errors.As(err, &de) {
		if de.File == "" {
			c := *de
			c.File = file
			return &c
		}
		return err
	}
	out := &DocError{File: file, Doc: doc, Err: err}
	if r != nil {
		out.Kind = string(r.GetKind())
		out.Name = displayName(r.Meta().Namespace, r.Meta().Name)
	}
	return out
}

// displayName is how a document names its object: "namespace/name" for
// namespaced kinds.
func displayName(namespace, name string) string {
	if namespace != "" && name != "" {
		return namespace + "/" + name
	}
	return name
}

// locateObj wraps err (unless already located) for a document still
// in its generic form.
func locateObj(err error, where, kind string, obj map[string]any) error {
	if err == nil {
		return nil
	}
	var de *DocError
	if errors.As(err, &de) {
		return err
	}
	md, _ := obj["metadata"].(map[string]any)
	name, _ := md["name"].(string)
	ns, _ := md["namespace"].(string)
	if ns == "" && name != "" {
		if k, kerr := ParseKind(kind); kerr == nil && k.Namespaced() {
			ns = "default" // as Decode defaults it
		}
	}
	return &DocError{Doc: where, Kind: kind, Name: displayName(ns, name), Err: err}
}

// decodeError is a decoding problem whose text carries no sentinel
// prefix (the DocError around it says where); errors.Is(err, ErrDecode)
// holds.
type decodeError struct{ msg string }

func (e *decodeError) Error() string        { return e.msg }
func (e *decodeError) Is(target error) bool { return target == ErrDecode }

func decodeErrorf(format string, args ...any) error {
	return &decodeError{msg: fmt.Sprintf(format, args...)}
}

func (e *ValidationError) fieldsText() string {
	parts := make([]string, len(e.Fields))
	for i, f := range e.Fields {
		parts[i] = f.String()
	}
	return strings.Join(parts, "; ")
}

// renderValue shows a value in an error as the user wrote it: scalars
// as themselves, lists and objects as compact JSON, never in Go's
// map[...] or {...} syntax.
func renderValue(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case string:
		return x
	case fmt.Stringer:
		return x.String()
	case error:
		return x.Error()
	}
	switch reflect.ValueOf(v).Kind() {
	case reflect.Map, reflect.Slice, reflect.Array, reflect.Struct, reflect.Pointer:
		if b, err := json.Marshal(v); err == nil {
			return string(b)
		}
	}
	return fmt.Sprint(v)
}

// typeWord says what a field of Go type t holds in the words of a YAML
// or JSON file ("a list", "an object"), never in Go's syntax
// (map[string]string, []api.Rule).
func typeWord(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "a whole number"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number, 0 or more"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Map:
		return "an object of names to " + strings.TrimPrefix(strings.TrimPrefix(typeWord(t.Elem()), "a "), "an ") + "s"
	case reflect.Struct:
		return "an object"
	}
	return "a value"
}

// valueWord is encoding/json's description of a value ("array",
// "number 1.5") in a file's words.
func valueWord(v string) string {
	switch {
	case v == "array":
		return "a list"
	case v == "object":
		return "an object"
	case v == "bool":
		return "true or false"
	case v == "string":
		return "a string"
	case strings.HasPrefix(v, "number"):
		return v
	}
	return v
}
