package selector

import (
	"slices"
	"strings"
)

// node is one element of a parsed selector. Nodes are plain values that are
// never modified after parsing, which is what makes Selector safe to share
// between goroutines.
type node interface {
	eval(labels Labels) bool
	// write appends the canonical text of the node.
	write(b *strings.Builder)
}

type allNode struct{}

func (allNode) eval(Labels) bool { return true }

func (allNode) write(b *strings.Builder) { b.WriteString("all()") }

type hasNode struct{ key string }

func (n hasNode) eval(labels Labels) bool {
	_, ok := labels.Get(n.key)
	return ok
}

func (n hasNode) write(b *strings.Builder) {
	b.WriteString("has(")
	b.WriteString(n.key)
	b.WriteByte(')')
}

type cmpKind uint8

const (
	cmpEq cmpKind = iota
	cmpNe
	cmpStartsWith
	cmpEndsWith
	cmpContains
)

// String returns the operator's canonical spelling.
func (k cmpKind) String() string {
	return [...]string{"==", "!=", "starts with", "ends with", "contains"}[k]
}

// cmpNode compares a label's value with a single string.
type cmpNode struct {
	kind       cmpKind
	key, value string
}

func (n cmpNode) eval(labels Labels) bool {
	v, ok := labels.Get(n.key)
	if !ok {
		// Only the negative operator holds for a missing label; treating
		// absence as "" would make k == '' match unlabelled objects.
		return n.kind == cmpNe
	}
	switch n.kind {
	case cmpEq:
		return v == n.value
	case cmpNe:
		return v != n.value
	case cmpStartsWith:
		return strings.HasPrefix(v, n.value)
	case cmpEndsWith:
		return strings.HasSuffix(v, n.value)
	default:
		return strings.Contains(v, n.value)
	}
}

func (n cmpNode) write(b *strings.Builder) {
	b.WriteString(n.key)
	b.WriteByte(' ')
	b.WriteString(n.kind.String())
	b.WriteByte(' ')
	writeQuoted(b, n.value)
}

// setNode tests membership in a sorted, duplicate-free list of values.
type setNode struct {
	key     string
	values  []string
	negated bool // "not in", which also matches when the label is absent
}

func (n setNode) eval(labels Labels) bool {
	v, ok := labels.Get(n.key)
	if !ok {
		return n.negated
	}
	_, found := slices.BinarySearch(n.values, v)
	return found != n.negated
}

func (n setNode) write(b *strings.Builder) {
	b.WriteString(n.key)
	if n.negated {
		b.WriteString(" not in {")
	} else {
		b.WriteString(" in {")
	}
	for i, v := range n.values {
		if i > 0 {
			b.WriteString(", ")
		}
		writeQuoted(b, v)
	}
	b.WriteByte('}')
}

// writeQuoted prefers double quotes but falls back to single quotes for
// values that contain a double quote, since the syntax has no escapes. The
// lexer cannot produce a value containing both kinds of quote.
func writeQuoted(b *strings.Builder, v string) {
	q := byte('"')
	if strings.IndexByte(v, '"') >= 0 {
		q = '\''
	}
	b.WriteByte(q)
	b.WriteString(v)
	b.WriteByte(q)
}

type notNode struct{ operand node }

func (n notNode) eval(labels Labels) bool { return !n.operand.eval(labels) }

// write omits parentheses around comparisons ("!a == 'b'") because "!"
// already applies to a whole comparison in the grammar; adding them would
// also let String exceed the nesting limit of a selector that was accepted.
func (n notNode) write(b *strings.Builder) {
	b.WriteByte('!')
	writeGrouped(b, n.operand, func(c node) bool {
		switch c.(type) {
		case andNode, orNode:
			return true
		}
		return false
	})
}

type andNode struct{ terms []node }

func (n andNode) eval(labels Labels) bool {
	for _, t := range n.terms {
		if !t.eval(labels) {
			return false
		}
	}
	return true
}

func (n andNode) write(b *strings.Builder) {
	for i, t := range n.terms {
		if i > 0 {
			b.WriteString(" && ")
		}
		writeGrouped(b, t, func(c node) bool {
			_, isOr := c.(orNode)
			return isOr
		})
	}
}

type orNode struct{ terms []node }

func (n orNode) eval(labels Labels) bool {
	for _, t := range n.terms {
		if t.eval(labels) {
			return true
		}
	}
	return false
}

// write never needs parentheses: || binds loosest and the parser has
// already spliced nested || groups into this node.
func (n orNode) write(b *strings.Builder) {
	for i, t := range n.terms {
		if i > 0 {
			b.WriteString(" || ")
		}
		t.write(b)
	}
}

func writeGrouped(b *strings.Builder, n node, needParens func(node) bool) {
	if !needParens(n) {
		n.write(b)
		return
	}
	b.WriteByte('(')
	n.write(b)
	b.WriteByte(')')
}
