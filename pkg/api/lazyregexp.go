package api

import (
	"regexp"
	"sync"
)

// lazyRegexp compiles expr on first use rather than at package
// initialisation: every binary importing pkg/api (the CNI plugins start
// once per pod) would otherwise pay for compiling every validation
// pattern before main runs. It panics on first use, as MustCompile does
// at start-up, when expr is invalid; the tests use each of them.
func lazyRegexp(expr string) func() *regexp.Regexp {
	return sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(expr) })
}
