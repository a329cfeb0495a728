// Package selector implements Project Calico's label selector language.
//
// Grammar (lowest to highest precedence):
//
//	expr    = and { "||" and }
//	and     = unary { "&&" unary }
//	unary   = { "!" } operand
//	operand = "(" expr ")" | "all" "(" ")" | "has" "(" key ")" | key op
//	op      = "==" str | "!=" str
//	        | "in" set | "not" "in" set
//	        | "starts" "with" str | "ends" "with" str | "contains" str
//	set     = "{" [ str { "," str } [ "," ] ] "}"
//	str     = '"' { any char except '"' } '"' | "'" { any char except "'" } "'"
//	key     = 1*512 of [a-zA-Z0-9_./-]
//
// An empty (or all-whitespace) selector is equivalent to all(). As in Calico,
// strings have no escape sequences, so a value can contain one kind of quote
// only by being wrapped in the other, and "notin", "startswith" and
// "endswith" are accepted as spellings of the two-word operators.
//
// Keywords are not reserved: an identifier is a function name only when an
// opening parenthesis follows it, and an operator only in operator position,
// so labels named "has", "in" or "not" can still be selected on.
//
// Negative operators (!=, not in) match when the label is absent, mirroring
// Calico, so that "!(k == 'v')" and "k != 'v'" select the same objects.
package selector

import (
	"errors"
	"fmt"
	"strings"
)

// Selector is a parsed, immutable label selector. It is safe for concurrent
// use because nothing mutates it after Parse returns.
type Selector interface {
	// Evaluate reports whether a set of labels satisfies the selector. A nil
	// map is treated as an object with no labels.
	Evaluate(labels map[string]string) bool
	// EvaluateLabels is Evaluate on a read-only view of the labels, for
	// callers that keep them in another shape than a map.
	EvaluateLabels(labels Labels) bool
	// String returns a canonical form that Parse accepts and that selects
	// exactly the same label sets, so selectors can be stored, compared
	// textually and re-parsed.
	String() string
}

// ErrSyntax is the sentinel matched by every parse failure, so callers can
// use errors.Is without depending on the message text.
var ErrSyntax = errors.New("selector: syntax error")

// SyntaxError describes where and why parsing failed, so that users editing a
// policy by hand can locate the mistake.
type SyntaxError struct {
	// Input is the complete selector text that was being parsed.
	Input string
	// Pos is the 0-based byte offset into Input at which the problem was
	// detected; it equals len(Input) when the input ended too early.
	Pos int
	// Msg says what was expected and what was found instead.
	Msg string
}

// Error formats the failure with its position and the offending input.
func (e *SyntaxError) Error() string {
	return fmt.Sprintf("selector: syntax error at position %d in %q: %s", e.Pos, e.Input, e.Msg)
}

// Unwrap lets errors.Is(err, ErrSyntax) succeed for every *SyntaxError.
func (e *SyntaxError) Unwrap() error { return ErrSyntax }

// Parse parses a selector expression. Any error it returns is a
// *SyntaxError that matches ErrSyntax.
func Parse(s string) (Selector, error) {
	root, err := parse(s)
	if err != nil {
		return nil, err
	}
	var b strings.Builder
	root.write(&b)
	return &selector{root: root, canonical: b.String()}, nil
}

// MustParse is Parse for selectors that are known to be valid, such as
// compile-time constants; it panics on error.
func MustParse(s string) Selector {
	sel, err := Parse(s)
	if err != nil {
		panic(err)
	}
	return sel
}

// selector pairs the AST with its rendering, which is computed once at parse
// time so that String is cheap for callers that use it as a map key.
type selector struct {
	root      node
	canonical string
}

func (s *selector) Evaluate(labels map[string]string) bool { return s.root.eval(mapLabels(labels)) }

func (s *selector) EvaluateLabels(labels Labels) bool { return s.root.eval(labels) }

// Labels is a read-only view of an object's labels.
type Labels interface {
	// Get returns the value of the label key and whether it is set.
	Get(key string) (string, bool)
}

// mapLabels is a map of labels as a Labels (a nil map has none).
type mapLabels map[string]string

func (m mapLabels) Get(key string) (string, bool) {
	v, ok := m[key]
	return v, ok
}

func (s *selector) String() string { return s.canonical }
