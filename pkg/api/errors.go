package api

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors; test with errors.Is.
var (
	// ErrInvalid wraps every validation failure.
	ErrInvalid = errors.New("api: invalid resource")
	// ErrUnknownKind is returned for a kind routed does not know.
	ErrUnknownKind = errors.New("api: unknown kind")
	// ErrDecode wraps failures to read a YAML or JSON document.
	ErrDecode = errors.New("api: cannot decode")
)

// FieldError is one validation problem in one field.
type FieldError struct {
	Field  string // dotted path, e.g. "spec.blockSize"
	Value  any    // the offending value, if useful to show
	Detail string // what is wrong
}

func (e FieldError) String() string {
	if e.Value == nil {
		return fmt.Sprintf("%s: %s", e.Field, e.Detail)
	}
	return fmt.Sprintf("%s: %s (got %s)", e.Field, e.Detail, renderValue(e.Value))
}

// ValidationError lists every problem found in one resource.
type ValidationError struct {
	Kind   Kind
	Name   string
	Fields []FieldError
}

func (e *ValidationError) Error() string {
	parts := make([]string, len(e.Fields))
	for i, f := range e.Fields {
		parts[i] = f.String()
	}
	return fmt.Sprintf("invalid %s %q: %s", e.Kind, e.Name, strings.Join(parts, "; "))
}

// Is makes errors.Is(err, ErrInvalid) true for every ValidationError.
func (e *ValidationError) Is(target error) bool { return target == ErrInvalid }

// errs collects field errors while validating.
type errs struct{ list []FieldError }

func (v *errs) add(field string, value any, format string, args ...any) {
	v.list = append(v.list, FieldError{Field: field, Value: value, Detail: fmt.Sprintf(format, args...)})
}

func (v *errs) result(k Kind, name string) error {
	if len(v.list) == 0 {
		return nil
	}
	return &ValidationError{Kind: k, Name: name, Fields: v.list}
}
