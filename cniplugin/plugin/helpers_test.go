package plugin

import (
	"crypto/sha1"
	"encoding/hex"
)

func sha1hex(s string) string {
	sum := sha1.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}
