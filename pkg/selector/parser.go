package selector

import (
	"slices"
)

// maxDepth bounds parenthesis nesting. The parser recurses once per level,
// so without a bound a hostile selector could exhaust the stack; real
// selectors never come close.
const maxDepth = 256

// operandStart lists what may begin an operand, for "expected ..." messages.
const operandStart = `label key, has(...), all(), "!" or "("`

type parser struct {
	lex   lexer
	tok   token // current, not yet consumed, token
	depth int
}

func parse(input string) (node, error) {
	p := &parser{lex: lexer{input: input}}
	if err := p.advance(); err != nil {
		return nil, err
	}
	if p.tok.kind == tokEOF {
		return allNode{}, nil
	}
	n, err := p.parseOr()
	if err != nil {
		return nil, err
	}
	switch p.tok.kind {
	case tokEOF:
		return n, nil
	case tokRParen:
		return nil, p.errorf(`unexpected ")" with no matching "("`)
	default:
		return nil, p.errorf(`expected "&&", "||" or end of input after a complete expression, found %s`, p.tok.describe())
	}
}

func (p *parser) advance() error {
	t, err := p.lex.next()
	if err != nil {
		return err
	}
	p.tok = t
	return nil
}

// peek returns the token after the current one without consuming anything.
// A lexical error is reported as EOF here; it resurfaces, at its proper
// position, when the parser actually advances onto it.
func (p *parser) peek() token {
	l := p.lex
	t, err := l.next()
	if err != nil {
		return token{kind: tokEOF}
	}
	return t
}

func (p *parser) errorf(format string, args ...any) error {
	return p.lex.errorf(p.tok.pos, format, args...)
}

func (p *parser) parseOr() (node, error) { return p.parseList(tokOr, p.parseAnd) }

func (p *parser) parseAnd() (node, error) { return p.parseList(tokAnd, p.parseUnary) }

// parseList parses sub { sep sub }. Building one n-ary node instead of a
// binary tree keeps long && / || chains from producing deep ASTs, which
// would otherwise make evaluation recursion depth proportional to input size.
func (p *parser) parseList(sep tokenKind, sub func() (node, error)) (node, error) {
	var terms []node
	for {
		n, err := sub()
		if err != nil {
			return nil, err
		}
		// Splice in a parenthesised group of the same operator, because
		// "a && (b && c)" means "a && b && c" and should print the same.
		switch n := n.(type) {
		case andNode:
			if sep == tokAnd {
				terms = append(terms, n.terms...)
			} else {
				terms = append(terms, n)
			}
		case orNode:
			if sep == tokOr {
				terms = append(terms, n.terms...)
			} else {
				terms = append(terms, n)
			}
		default:
			terms = append(terms, n)
		}
		if p.tok.kind != sep {
			break
		}
		if err := p.advance(); err != nil {
			return nil, err
		}
	}
	switch {
	case len(terms) == 1:
		return terms[0], nil
	case sep == tokAnd:
		return andNode{terms}, nil
	default:
		return orNode{terms}, nil
	}
}

// parseUnary folds any run of "!" into a single negation, as Calico does;
// iterating rather than recursing means "!!!!…" cannot exhaust the stack.
func (p *parser) parseUnary() (node, error) {
	negate := false
	for p.tok.kind == tokNot {
		negate = !negate
		if err := p.advance(); err != nil {
			return nil, err
		}
	}
	n, err := p.parseOperand()
	if err != nil || !negate {
		return n, err
	}
	if inner, ok := n.(notNode); ok {
		return inner.operand, nil // "!(!x)" is x
	}
	return notNode{n}, nil
}

func (p *parser) parseOperand() (node, error) {
	switch p.tok.kind {
	case tokLParen:
		return p.parseGroup()
	case tokIdent:
		if p.peek().kind == tokLParen {
			return p.parseCall()
		}
		return p.parseComparison()
	case tokEOF:
		return nil, p.errorf("expected %s, found end of input", operandStart)
	default:
		return nil, p.errorf("expected %s, found %s", operandStart, p.tok.describe())
	}
}

func (p *parser) parseGroup() (node, error) {
	open := p.tok.pos
	if p.depth++; p.depth > maxDepth {
		return nil, p.errorf("parentheses nested more than %d deep", maxDepth)
	}
	if err := p.advance(); err != nil {
		return nil, err
	}
	n, err := p.parseOr()
	if err != nil {
		return nil, err
	}
	if p.tok.kind != tokRParen {
		return nil, p.errorf(`missing ")" to close the "(" at position %d, found %s`, open, p.tok.describe())
	}
	p.depth--
	return n, p.advance()
}

// parseCall handles name(...) forms; the current token is the name and the
// next one is known to be "(".
func (p *parser) parseCall() (node, error) {
	name := p.tok
	if name.text != "has" && name.text != "all" {
		return nil, p.errorf("unknown function %q (expected has or all)", name.text)
	}
	if err := p.advanceN(2); err != nil {
		return nil, err
	}
	var n node = allNode{}
	if name.text == "has" {
		if p.tok.kind != tokIdent {
			return nil, p.errorf("expected label key inside has(), found %s", p.tok.describe())
		}
		n = hasNode{key: p.tok.text}
		if err := p.advance(); err != nil {
			return nil, err
		}
	}
	if p.tok.kind != tokRParen {
		if name.text == "all" {
			return nil, p.errorf(`expected ")" after "all(" (all takes no arguments), found %s`, p.tok.describe())
		}
		return nil, p.errorf(`expected ")" to close "has(", found %s`, p.tok.describe())
	}
	return n, p.advance()
}

func (p *parser) advanceN(n int) error {
	for range n {
		if err := p.advance(); err != nil {
			return err
		}
	}
	return nil
}

// parseComparison parses "key op operand"; the current token is the key.
func (p *parser) parseComparison() (node, error) {
	key := p.tok.text
	if err := p.advance(); err != nil {
		return nil, err
	}
	op := p.tok
	var kind cmpKind
	switch {
	case op.kind == tokEq:
		kind = cmpEq
	case op.kind == tokNe:
		kind = cmpNe
	case op.is("contains"):
		kind = cmpContains
	case op.is("startswith"):
		kind = cmpStartsWith
	case op.is("endswith"):
		kind = cmpEndsWith
	case op.is("starts"), op.is("ends"):
		if err := p.advance(); err != nil {
			return nil, err
		}
		if !p.tok.is("with") {
			return nil, p.errorf(`expected "with" after %q, found %s`, op.text, p.tok.describe())
		}
		kind = cmpStartsWith
		if op.text == "ends" {
			kind = cmpEndsWith
		}
	case op.is("in"), op.is("notin"):
		return p.parseSet(key, op.text == "notin", op.text)
	case op.is("not"):
		if err := p.advance(); err != nil {
			return nil, err
		}
		if !p.tok.is("in") {
			return nil, p.errorf(`expected "in" after "not", found %s`, p.tok.describe())
		}
		return p.parseSet(key, true, "not in")
	default:
		return nil, p.errorf("expected operator (==, !=, in, not in, starts with, ends with, contains) after label key %q, found %s",
			key, op.describe())
	}
	if err := p.advance(); err != nil {
		return nil, err
	}
	if p.tok.kind != tokString {
		return nil, p.errorf("expected quoted string after %q, found %s", kind.String(), p.tok.describe())
	}
	value := p.tok.text
	return cmpNode{kind: kind, key: key, value: value}, p.advance()
}

// parseSet parses "{ 'a', 'b' }"; the current token is the operator word.
// A trailing comma is tolerated because Calico's parser accepts one.
func (p *parser) parseSet(key string, negated bool, opText string) (node, error) {
	if err := p.advance(); err != nil {
		return nil, err
	}
	if p.tok.kind != tokLBrace {
		return nil, p.errorf(`expected "{" after %q, found %s`, opText, p.tok.describe())
	}
	open := p.tok.pos
	if err := p.advance(); err != nil {
		return nil, err
	}
	var values []string
	for p.tok.kind != tokRBrace {
		if p.tok.kind != tokString {
			return nil, p.errorf(`expected quoted string or "}" in the set opened at position %d, found %s`, open, p.tok.describe())
		}
		values = append(values, p.tok.text)
		if err := p.advance(); err != nil {
			return nil, err
		}
		if p.tok.kind == tokRBrace {
			break
		}
		if p.tok.kind != tokComma {
			return nil, p.errorf(`expected "," or "}" in the set opened at position %d, found %s`, open, p.tok.describe())
		}
		if err := p.advance(); err != nil {
			return nil, err
		}
	}
	// Sorted, deduplicated values give a canonical String and let eval
	// use binary search.
	slices.Sort(values)
	values = slices.Compact(values)
	return setNode{key: key, values: values, negated: negated}, p.advance()
}
