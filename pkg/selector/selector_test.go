package selector

import (
	"errors"
	"strings"
	"sync"
	"testing"
)

type labels = map[string]string

func TestEvaluate(t *testing.T) {
	tests := []struct {
		sel    string
		labels labels
		want   bool
	}{
		// all() and the empty selector.
		{"all()", nil, true},
		{"all()", labels{"a": "b"}, true},
		{"", nil, true},
		{" \t\n", labels{"a": "b"}, true},
		{"all( )", nil, true},
		{"!all()", labels{"a": "b"}, false},

		// has()
		{"has(a)", labels{"a": "b"}, true},
		{"has(a)", labels{"a": ""}, true},
		{"has(a)", labels{"b": "a"}, false},
		{"has(a)", nil, false},
		{"has( a )", labels{"a": "x"}, true},
		{"has (a)", labels{"a": "x"}, true},
		{"!has(a)", labels{}, true},
		{"!has(a)", labels{"a": "x"}, false},
		{"has(kubernetes.io/hostname)", labels{"kubernetes.io/hostname": "n1"}, true},

		// ==
		{"a == 'b'", labels{"a": "b"}, true},
		{`a == "b"`, labels{"a": "b"}, true},
		{"a == 'b'", labels{"a": "c"}, false},
		{"a == 'b'", labels{"a": "bb"}, false},
		{"a == 'b'", nil, false},
		{"a == ''", labels{"a": ""}, true},
		{"a == ''", labels{}, false}, // absent is not the same as empty
		{"a=='b'", labels{"a": "b"}, true},
		{"projectcalico.org/rr == 'true'", labels{"projectcalico.org/rr": "true"}, true},
		{"my_key-1.x/y == 'v'", labels{"my_key-1.x/y": "v"}, true},

		// !=, which holds when the label is absent.
		{"a != 'b'", labels{"a": "c"}, true},
		{"a != 'b'", labels{"a": "b"}, false},
		{"a != 'b'", labels{}, true},
		{"a != 'b'", nil, true},
		{`a!="b"`, labels{"a": "b"}, false},

		// in / not in
		{"a in {'x', 'y'}", labels{"a": "x"}, true},
		{"a in {'x', 'y'}", labels{"a": "y"}, true},
		{"a in {'x', 'y'}", labels{"a": "z"}, false},
		{"a in {'x', 'y'}", nil, false},
		{"a in {}", labels{"a": ""}, false},
		{"a in {''}", labels{"a": ""}, true},
		{`a in{"x","y",}`, labels{"a": "y"}, true},
		{"a not in {'x', 'y'}", labels{"a": "x"}, false},
		{"a not in {'x', 'y'}", labels{"a": "z"}, true},
		{"a not in {'x', 'y'}", nil, true},
		{"a not in {}", labels{"a": "x"}, true},
		{"a notin {'x'}", labels{"a": "x"}, false},
		{"a not\tin {'x'}", labels{"a": "y"}, true},

		// starts with / ends with / contains: all false when absent.
		{"a starts with 'fo'", labels{"a": "foo"}, true},
		{"a starts with 'oo'", labels{"a": "foo"}, false},
		{"a starts with ''", labels{"a": "foo"}, true},
		{"a starts with ''", nil, false},
		{"a startswith 'f'", labels{"a": "foo"}, true},
		{"a ends with 'oo'", labels{"a": "foo"}, true},
		{"a ends with 'fo'", labels{"a": "foo"}, false},
		{"a endswith 'o'", labels{"a": "foo"}, true},
		{"a ends with 'o'", nil, false},
		{"a contains 'o'", labels{"a": "foo"}, true},
		{"a contains 'x'", labels{"a": "foo"}, false},
		{"a contains ''", nil, false},

		// Quoting: either quote kind, the other kind allowed inside.
		{`a == "it's"`, labels{"a": "it's"}, true},
		{`a == 'say "hi"'`, labels{"a": `say "hi"`}, true},
		{"a == 'x y && z'", labels{"a": "x y && z"}, true},
		{"a == 'ünï'", labels{"a": "ünï"}, true},

		// Negation, conjunction, disjunction.
		{"!a == 'b'", labels{"a": "b"}, false},
		{"!a == 'b'", labels{}, true},
		{"!!has(a)", labels{"a": ""}, true},
		{"!(!has(a))", labels{}, false},
		{"has(a) && has(b)", labels{"a": "", "b": ""}, true},
		{"has(a) && has(b)", labels{"a": ""}, false},
		{"has(a) || has(b)", labels{"b": ""}, true},
		{"has(a) || has(b)", labels{"c": ""}, false},
		{"has(a)&&has(b)&&has(c)", labels{"a": "", "b": "", "c": ""}, true},

		// Precedence: ! over && over ||.
		{"has(a) || has(b) && has(c)", labels{"a": ""}, true},
		{"(has(a) || has(b)) && has(c)", labels{"a": ""}, false},
		{"has(a) && has(b) || has(c)", labels{"c": ""}, true},
		{"has(a) && (has(b) || has(c))", labels{"c": ""}, false},
		{"!has(a) && has(b)", labels{"b": ""}, true},
		{"!(has(a) && has(b))", labels{"b": ""}, true},
		{"!has(a) || has(b)", labels{"a": ""}, false},
		{"!(has(a) || has(b))", labels{}, true},
		{"((((has(a)))))", labels{"a": ""}, true},

		// Keywords are not reserved as keys.
		{"has == 'x'", labels{"has": "x"}, true},
		{"in in {'x'}", labels{"in": "x"}, true},
		{"not not in {'x'}", labels{"not": "y"}, true},
		{"all != 'x'", labels{"all": "x"}, false},
		{"has(has)", labels{"has": ""}, true},
	}
	for _, tt := range tests {
		sel, err := Parse(tt.sel)
		if err != nil {
			t.Errorf("Parse(%q): unexpected error: %v", tt.sel, err)
			continue
		}
		if got := sel.Evaluate(tt.labels); got != tt.want {
			t.Errorf("Parse(%q).Evaluate(%v) = %v, want %v", tt.sel, tt.labels, got, tt.want)
		}
	}
}

func TestString(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", "all()"},
		{"all()", "all()"},
		{"has( a )", "has(a)"},
		{"a=='b'", `a == "b"`},
		{`a == 'say "hi"'`, `a == 'say "hi"'`},
		{"a!='b'", `a != "b"`},
		{"a in {'y','x','y'}", `a in {"x", "y"}`},
		{"a notin {}", "a not in {}"},
		{"a startswith 'x'", `a starts with "x"`},
		{"a   ends   with 'x'", `a ends with "x"`},
		{"a contains 'x'", `a contains "x"`},
		{"!a == 'x'", `!a == "x"`},
		{"!!has(a)", "has(a)"},
		{"!(!has(a))", "has(a)"},
		{"!(has(a) && has(b))", "!(has(a) && has(b))"},
		{"has(a) && (has(b) && has(c))", "has(a) && has(b) && has(c)"},
		{"(has(a) || has(b)) || has(c)", "has(a) || has(b) || has(c)"},
		{"(has(a) || has(b)) && has(c)", "(has(a) || has(b)) && has(c)"},
		{"has(a) || (has(b) && has(c))", "has(a) || has(b) && has(c)"},
		{"((has(a)))", "has(a)"},
	}
	for _, tt := range tests {
		sel, err := Parse(tt.in)
		if err != nil {
			t.Errorf("Parse(%q): unexpected error: %v", tt.in, err)
			continue
		}
		if got := sel.String(); got != tt.want {
			t.Errorf("Parse(%q).String() = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestSyntaxErrors(t *testing.T) {
	tests := []struct {
		in      string
		pos     int
		wantMsg string
	}{
		{"a == ", 5, `expected quoted string after "==", found end of input`},
		{"a == b", 5, `expected quoted string after "==", found "b"`},
		{"a != ", 5, `expected quoted string after "!="`},
		{"a = 'b'", 2, `unexpected "=" (did you mean "=="?)`},
		{"a == 'b", 5, "unterminated string: missing closing '"},
		{`a == "b`, 5, `unterminated string: missing closing "`},
		{"a 'x", 2, "unterminated string"},
		{"(a == 'b'", 9, `missing ")" to close the "(" at position 0, found end of input`},
		{"(has(a) has(b))", 8, `missing ")" to close the "(" at position 0, found "has"`},
		{"a == 'b')", 8, `unexpected ")" with no matching "("`},
		{"a == 'b' c", 9, `expected "&&", "||" or end of input after a complete expression, found "c"`},
		{"foo(x)", 0, `unknown function "foo" (expected has or all)`},
		{"global()", 0, `unknown function "global"`},
		{"all(x)", 4, `expected ")" after "all("`},
		{"has()", 4, "expected label key inside has(), found \")\""},
		{"has(a", 5, `expected ")" to close "has(", found end of input`},
		{"has('a')", 4, `expected label key inside has(), found string "a"`},
		{"a", 1, "expected operator (==, !=, in, not in, starts with, ends with, contains) after label key \"a\", found end of input"},
		{"a b 'x'", 2, `after label key "a", found "b"`},
		{"a in 'x'", 5, `expected "{" after "in", found string "x"`},
		{"a not in 'x'", 9, `expected "{" after "not in"`},
		{"a not 'x'", 6, `expected "in" after "not", found string "x"`},
		{"a starts 'x'", 9, `expected "with" after "starts"`},
		{"a ends with", 11, `expected quoted string after "ends with", found end of input`},
		{"a in {'x' 'y'}", 10, `expected "," or "}" in the set opened at position 5, found string "y"`},
		{"a in {,}", 6, `expected quoted string or "}" in the set opened at position 5, found ","`},
		{"a in {'x',,}", 10, `expected quoted string or "}"`},
		{"a in {'x'", 9, `expected "," or "}" in the set opened at position 5, found end of input`},
		{"&&", 0, `expected label key, has(...), all(), "!" or "(", found "&&"`},
		{"has(a) & has(b)", 7, `unexpected "&" (did you mean "&&"?)`},
		{"has(a) | has(b)", 7, `unexpected "|" (did you mean "||"?)`},
		{"has(a) &&", 9, `expected label key, has(...), all(), "!" or "(", found end of input`},
		{"|| has(a)", 0, `expected label key, has(...), all(), "!" or "(", found "||"`},
		{"has(a) && || has(b)", 10, `found "||"`},
		{"()", 1, `found ")"`},
		{"!", 1, "found end of input"},
		{"== 'a'", 0, `found "=="`},
		{"'a' == a", 0, `found string "a"`},
		{"a == 'b' #", 9, `unexpected character "#"`},
		{"a == 'b' é", 9, `unexpected character "é"`},
		{"a == 'b' \xff", 9, "invalid UTF-8 byte 0xff"},
		{"a: b", 1, `unexpected character ":"`},
		{strings.Repeat("k", 513) + " == 'x'", 0, "label key is 513 bytes long, longer than the maximum of 512"},
	}
	for _, tt := range tests {
		sel, err := Parse(tt.in)
		if err == nil {
			t.Errorf("Parse(%q) = %q, want error", tt.in, sel)
			continue
		}
		if !errors.Is(err, ErrSyntax) {
			t.Errorf("Parse(%q): error %v does not match ErrSyntax", tt.in, err)
		}
		var se *SyntaxError
		if !errors.As(err, &se) {
			t.Errorf("Parse(%q): error %T is not a *SyntaxError", tt.in, err)
			continue
		}
		if se.Pos != tt.pos || se.Input != tt.in || !strings.Contains(se.Msg, tt.wantMsg) {
			t.Errorf("Parse(%q): got Pos %d, Msg %q; want Pos %d, Msg containing %q", tt.in, se.Pos, se.Msg, tt.pos, tt.wantMsg)
		}
	}
}

func TestSyntaxErrorFormat(t *testing.T) {
	_, err := Parse("a == ")
	want := `selector: syntax error at position 5 in "a == ": expected quoted string after "==", found end of input`
	if err == nil || err.Error() != want {
		t.Fatalf("Parse error = %v, want %s", err, want)
	}
}

func TestNestingLimit(t *testing.T) {
	nest := func(n int) string {
		return strings.Repeat("(", n) + "has(a)" + strings.Repeat(")", n)
	}
	if _, err := Parse(nest(maxDepth)); err != nil {
		t.Errorf("nesting at the limit: unexpected error: %v", err)
	}
	for _, n := range []int{maxDepth + 1, 1_000_000} {
		_, err := Parse(nest(n))
		var se *SyntaxError
		if !errors.As(err, &se) || se.Pos != maxDepth || !strings.Contains(se.Msg, "nested more than 256 deep") {
			t.Errorf("nesting %d: got %v, want depth error at position %d", n, err, maxDepth)
		}
	}
	// String must never add nesting, or a selector accepted at the limit
	// would print as one that is rejected. Every paren here is necessary.
	canon := "has(z)"
	for i := range maxDepth {
		if i%2 == 0 {
			canon = "has(a) && (has(b) || " + canon + ")"
		} else {
			canon = "!(has(c) && " + canon + ")"
		}
	}
	sel, err := Parse(canon)
	if err != nil {
		t.Fatalf("necessary nesting at the limit: %v", err)
	}
	if sel.String() != canon {
		t.Errorf("canonical input at the limit printed differently:\n%s\n%s", canon, sel)
	}
	checkRoundTrip(t, canon, sel, roundTripLabels)

	// Unbalanced input must fail on the limit too, not recurse to the end.
	if _, err := Parse(strings.Repeat("(", 1_000_000)); !errors.Is(err, ErrSyntax) {
		t.Errorf("deep unbalanced input: got %v, want ErrSyntax", err)
	}

	// Neither negation runs nor long chains count as nesting.
	long := []string{
		strings.Repeat("!", 100_001) + "has(a)",
		strings.Repeat("has(a) && ", 100_000) + "has(a)",
		strings.Repeat("has(b) || ", 100_000) + "has(a)",
	}
	for _, s := range long {
		sel, err := Parse(s)
		if err != nil {
			t.Fatalf("Parse(%.20q...): %v", s, err)
		}
		if sel.Evaluate(labels{"a": ""}) {
			if strings.HasPrefix(s, "!") {
				t.Errorf("odd number of negations evaluated true")
			}
		} else if !strings.HasPrefix(s, "!") {
			t.Errorf("Parse(%.20q...) evaluated false", s)
		}
	}
}

// roundTripLabels are label sets chosen to tell apart the values and keys
// used by roundTripSelectors, including absent and empty labels.
var roundTripLabels = []labels{
	nil,
	{"a": ""},
	{"a": "b"},
	{"a": "x", "b": "y"},
	{"a": "xyz", "c": "z"},
	{"b": "b", "c": ""},
	{"a": `say "hi"`, "b": "it's"},
	{"kubernetes.io/hostname": "n1", "has": "x", "in": "y"},
}

var roundTripSelectors = []string{
	"", "all()", "!all()", "has(a)", "!has(b)", "a == 'b'", "a != 'b'", `a == ""`,
	"a in {'x','b'}", "a not in {'x','b'}", "a in {}", "a not in {}",
	"a starts with 'x'", "a ends with 'z'", "a contains 'y'", "b contains ''",
	`a == 'say "hi"'`, `b == "it's"`, "!a == 'b'", "!(a == 'b' || has(c))",
	"has(a) || has(b) && has(c)", "(has(a) || has(b)) && has(c)",
	"!(!(has(a) && b == 'y')) || c != 'z'", "((a == 'x') && (b == 'y'))",
	"has(kubernetes.io/hostname) && has == 'x' && in in {'y'}",
	"!(a in {'b'} && !(has(b) || c == '')) || !has(a) && a != ''",
}

func TestRoundTrip(t *testing.T) {
	for _, s := range roundTripSelectors {
		sel := MustParse(s)
		checkRoundTrip(t, s, sel, roundTripLabels)
	}
}

// checkRoundTrip asserts that sel's canonical form re-parses to a selector
// that prints identically and agrees with sel on every label set.
func checkRoundTrip(t *testing.T, input string, sel Selector, sets []labels) {
	t.Helper()
	canon := sel.String()
	again, err := Parse(canon)
	if err != nil {
		t.Fatalf("Parse(%q).String() = %q, which does not re-parse: %v", input, canon, err)
	}
	if again.String() != canon {
		t.Errorf("String not stable for %q: %q then %q", input, canon, again.String())
	}
	for _, l := range sets {
		if a, b := sel.Evaluate(l), again.Evaluate(l); a != b {
			t.Errorf("%q and its canonical form %q disagree on %v: %v vs %v", input, canon, l, a, b)
		}
	}
}

func TestMustParse(t *testing.T) {
	if got := MustParse("has(a)").String(); got != "has(a)" {
		t.Errorf("MustParse(has(a)).String() = %q", got)
	}
	defer func() {
		r := recover()
		err, ok := r.(error)
		if !ok || !errors.Is(err, ErrSyntax) {
			t.Errorf("MustParse of invalid input panicked with %v, want a syntax error", r)
		}
	}()
	MustParse("a =")
}

// TestConcurrentEvaluate is meaningful under -race: a shared Selector must
// not be mutated by evaluation.
func TestConcurrentEvaluate(t *testing.T) {
	sel := MustParse("a in {'x', 'y'} && !has(b) || c starts with 'p'")
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := labels{"a": "x"}
			if i%2 == 1 {
				l["b"] = ""
			}
			for range 1000 {
				if got := sel.Evaluate(l); got != (i%2 == 0) {
					t.Errorf("goroutine %d: Evaluate = %v", i, got)
					return
				}
				_ = sel.String()
			}
		}()
	}
	wg.Wait()
}
