package api

import (
	"fmt"
	"time"

	"github.com/routed-net/routed/pkg/selector"
)

// Names are DNS-subdomain-like so they are safe in datastore keys and in
// Kubernetes; "node.<name>" for per-node BGPConfiguration fits too.
var nameRE = lazyRegexp(`^[a-z0-9]([-a-z0-9._]*[a-z0-9])?$`)

func validateName(v *errs, name string) {
	switch {
	case name == "":
		v.add("metadata.name", nil, "is required")
	case len(name) > 253:
		v.add("metadata.name", name, "is longer than 253 characters")
	case !nameRE().MatchString(name):
		v.add("metadata.name", name, "must be lower-case letters, digits, '-', '.' or '_', starting and ending with a letter or digit")
	}
}

var labelKeyRE = lazyRegexp(`^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)
var labelValueRE = lazyRegexp(`^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$`)

func validateLabels(v *errs, field string, labels map[string]string) {
	for k, val := range labels {
		if !labelKeyRE().MatchString(k) || len(k) > 316 {
			v.add(field, k, "is not a valid label key")
		}
		if !labelValueRE().MatchString(val) || len(val) > 63 {
			v.add(field+"."+k, val, "is not a valid label value")
		}
	}
}

func validateSelector(v *errs, field, sel string) {
	if sel == "" {
		return
	}
	if _, err := selector.Parse(sel); err != nil {
		v.add(field, nil, "%v", err)
	}
}

// validateDuration returns the parsed duration, or 0 after recording an error.
func validateDuration(v *errs, field, s string) time.Duration {
	if s == "" {
		return 0
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		v.add(field, s, "is not a duration like 30s or 1m30s")
		return 0
	}
	return d
}

func indexed(field string, i int) string { return fmt.Sprintf("%s[%d]", field, i) }
