package selector

import (
	"errors"
	"slices"
	"testing"
)

// FuzzParse checks that Parse never panics, that every failure is a
// well-formed SyntaxError, and that every success has a canonical form
// which re-parses to an equivalent selector.
func FuzzParse(f *testing.F) {
	for _, s := range roundTripSelectors {
		f.Add(s)
	}
	for _, s := range []string{
		"a == ", "a = 'b'", "(a == 'b'", "a == 'b')", "foo(x)", "all(x)", "has()",
		"a in {'x',}", "a notin {}", "a startswith 'x'", "!!!(has(a))", "a == 'b' \xff",
		"((((((((((has(a))))))))))", "has(a) && (b == 'x' || !c in {'y'})",
		`k == "it's" || k == 'say "hi"'`, "x.y/z-1_2 ends with 'q'",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, input string) {
		sel, err := Parse(input)
		if err != nil {
			var se *SyntaxError
			if !errors.As(err, &se) || !errors.Is(err, ErrSyntax) {
				t.Fatalf("Parse(%q) returned %T %v, want *SyntaxError", input, err, err)
			}
			if se.Pos < 0 || se.Pos > len(input) || se.Input != input || se.Msg == "" {
				t.Fatalf("Parse(%q): malformed SyntaxError %+v", input, se)
			}
			return
		}
		checkRoundTrip(t, input, sel, slices.Concat(roundTripLabels, labelsFor(sel)))
	})
}

// labelsFor derives label sets from the keys and values a selector mentions,
// because fixed label sets rarely contain the keys that fuzzed input uses.
func labelsFor(sel Selector) []labels {
	var keys, values []string
	var walk func(node)
	walk = func(n node) {
		switch n := n.(type) {
		case hasNode:
			keys = append(keys, n.key)
		case cmpNode:
			keys, values = append(keys, n.key), append(values, n.value, n.value+"x", "x"+n.value)
		case setNode:
			keys, values = append(keys, n.key), append(values, n.values...)
		case notNode:
			walk(n.operand)
		case andNode:
			for _, c := range n.terms {
				walk(c)
			}
		case orNode:
			for _, c := range n.terms {
				walk(c)
			}
		}
	}
	walk(sel.(*selector).root)
	values = append(values, "")
	const limit = 8 // keep each fuzz iteration cheap
	if len(keys) > limit {
		keys = keys[:limit]
	}
	if len(values) > limit {
		values = values[:limit]
	}
	var sets []labels
	for _, v := range values {
		all, alt := labels{}, labels{}
		for i, k := range keys {
			all[k] = v
			if i%2 == 0 {
				alt[k] = v
			}
		}
		sets = append(sets, all, alt)
	}
	return sets
}
