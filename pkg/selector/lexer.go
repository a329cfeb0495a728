package selector

import (
	"fmt"
	"strconv"
	"unicode/utf8"
)

// maxKeyLen matches the bound Calico puts on label keys; anything longer
// cannot be a real Kubernetes label and is more likely a missing quote.
const maxKeyLen = 512

type tokenKind uint8

const (
	tokEOF tokenKind = iota
	tokIdent
	tokString
	tokEq
	tokNe
	tokNot
	tokAnd
	tokOr
	tokLParen
	tokRParen
	tokLBrace
	tokRBrace
	tokComma
)

// punctuation gives the source spelling of fixed tokens for error messages.
var punctuation = [...]string{
	tokEq:     "==",
	tokNe:     "!=",
	tokNot:    "!",
	tokAnd:    "&&",
	tokOr:     "||",
	tokLParen: "(",
	tokRParen: ")",
	tokLBrace: "{",
	tokRBrace: "}",
	tokComma:  ",",
}

type token struct {
	kind tokenKind
	pos  int
	// text is the identifier, or the string value without its quotes.
	text string
}

// describe renders a token the way a user would recognise it in their input.
func (t token) describe() string {
	switch t.kind {
	case tokEOF:
		return "end of input"
	case tokIdent:
		return strconv.Quote(t.text)
	case tokString:
		return "string " + strconv.Quote(t.text)
	default:
		return strconv.Quote(punctuation[t.kind])
	}
}

// is reports whether t is the bare word w; keywords are matched this way
// rather than lexed as distinct tokens so that they stay usable as keys.
func (t token) is(w string) bool { return t.kind == tokIdent && t.text == w }

// lexer produces tokens on demand rather than up front so that the parser
// reports the earliest error in the input, whether lexical or grammatical.
// It is a small value type so the parser can look ahead by copying it.
type lexer struct {
	input string
	pos   int
}

func isKeyChar(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '_' || c == '.' || c == '/' || c == '-'
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}

func (l *lexer) errorf(pos int, format string, args ...any) *SyntaxError {
	return &SyntaxError{Input: l.input, Pos: pos, Msg: fmt.Sprintf(format, args...)}
}

func (l *lexer) next() (token, error) {
	for l.pos < len(l.input) && isSpace(l.input[l.pos]) {
		l.pos++
	}
	start := l.pos
	if start == len(l.input) {
		return token{kind: tokEOF, pos: start}, nil
	}
	c := l.input[start]
	// pair handles operators whose first character is meaningless alone
	// (or means something else alone, in the case of "!").
	pair := func(second byte, two, one tokenKind, hint string) (token, error) {
		if start+1 < len(l.input) && l.input[start+1] == second {
			l.pos += 2
			return token{kind: two, pos: start}, nil
		}
		if hint != "" {
			return token{}, l.errorf(start, "unexpected %q (did you mean %q?)", string(c), hint)
		}
		l.pos++
		return token{kind: one, pos: start}, nil
	}
	switch c {
	case '=':
		return pair('=', tokEq, 0, "==")
	case '!':
		return pair('=', tokNe, tokNot, "")
	case '&':
		return pair('&', tokAnd, 0, "&&")
	case '|':
		return pair('|', tokOr, 0, "||")
	case '(':
		return l.single(tokLParen)
	case ')':
		return l.single(tokRParen)
	case '{':
		return l.single(tokLBrace)
	case '}':
		return l.single(tokRBrace)
	case ',':
		return l.single(tokComma)
	case '"', '\'':
		return l.lexString(start, c)
	}
	if isKeyChar(c) {
		for l.pos < len(l.input) && isKeyChar(l.input[l.pos]) {
			l.pos++
		}
		if n := l.pos - start; n > maxKeyLen {
			return token{}, l.errorf(start, "label key is %d bytes long, longer than the maximum of %d", n, maxKeyLen)
		}
		return token{kind: tokIdent, pos: start, text: l.input[start:l.pos]}, nil
	}
	r, size := utf8.DecodeRuneInString(l.input[start:])
	if r == utf8.RuneError && size == 1 {
		return token{}, l.errorf(start, "invalid UTF-8 byte 0x%02x", c)
	}
	return token{}, l.errorf(start, "unexpected character %q", string(r))
}

func (l *lexer) single(kind tokenKind) (token, error) {
	l.pos++
	return token{kind: kind, pos: l.pos - 1}, nil
}

// lexString reads a quoted value. Calico strings have no escapes, which is
// why the value simply runs to the next matching quote.
func (l *lexer) lexString(start int, quote byte) (token, error) {
	for i := start + 1; i < len(l.input); i++ {
		if l.input[i] == quote {
			l.pos = i + 1
			return token{kind: tokString, pos: start, text: l.input[start+1 : i]}, nil
		}
	}
	return token{}, l.errorf(start, "unterminated string: missing closing %c", quote)
}
