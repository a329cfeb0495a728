package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// ASNumber is a 4-byte BGP AS number. In YAML/JSON it may be written as a
// number (64512), a string ("64512") or in asdot notation ("1.10").
type ASNumber uint32

// UnmarshalJSON accepts a number or a string and rejects values that do not
// fit in 32 bits with an error that says so.
func (a *ASNumber) UnmarshalJSON(b []byte) error {
	s := string(bytes.TrimSpace(b))
	switch {
	case s == "null":
		return nil // as encoding/json does: null leaves the value unset
	case strings.HasPrefix(s, `"`):
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
	case strings.ContainsAny(s, ".eE"):
		// An unquoted 1.10 reaches us as the float 1.1, so reading it as
		// asdot would silently give AS 1.1 (65537) instead of 1.10 (65546).
		return fmt.Errorf("AS number %s is not a whole number; write asdot notation quoted, e.g. \"1.10\"", s)
	}
	v, err := ParseASNumber(s)
	if err != nil {
		return err
	}
	*a = v
	return nil
}

// ParseASNumber parses "64512" or asdot "1.10".
func ParseASNumber(s string) (ASNumber, error) {
	if hi, lo, ok := strings.Cut(s, "."); ok {
		h, err1 := strconv.ParseUint(hi, 10, 16)
		l, err2 := strconv.ParseUint(lo, 10, 16)
		if err1 != nil || err2 != nil {
			return 0, fmt.Errorf("AS number %q: asdot notation needs two numbers 0-65535", s)
		}
		if n := h<<16 | l; n >= 1 && n <= 4294967294 {
			return ASNumber(n), nil
		}
		return 0, fmt.Errorf("AS number %q out of range: must be between 1 and 4294967294", s)
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("AS number %q is not a number", s)
	}
	if n < 1 || n > 4294967294 {
		return 0, fmt.Errorf("AS number %d out of range: must be between 1 and 4294967294", n)
	}
	return ASNumber(n), nil
}
