package listcache

import (
	"strings"
	"testing"
)

// TestInPartsAllocatesNothing: the check of every watch event's key
// against the cache's parts allocates nothing, where converting the key
// to a string for strings.HasPrefix (as before) copied it to the heap
// once per part tried; and it answers as strings.HasPrefix does.
func TestInPartsAllocatesNothing(t *testing.T) {
	h := header{Prefix: prefix, Parts: parts}
	key := []byte(epPart + "team-0042/sim--00017-k8s-app--3--7f9c6d5b8--00012-eth0")
	var sink bool
	old := testing.AllocsPerRun(1000, func() {
		for _, p := range h.Parts {
			if strings.HasPrefix(string(key), p) {
				sink = true
			}
		}
	})
	now := testing.AllocsPerRun(1000, func() { sink = inParts(key, h) })
	t.Logf("allocations a key: %.0f converting it (before), %.0f now", old, now)
	if now != 0 {
		t.Errorf("inParts allocates %.0f times a key", now)
	}
	_ = sink
	for _, k := range []string{epPart + "a", epPart, epPart[:len(epPart)-1], probeKey, polPart + "x", handles + "h", "", "/routed"} {
		want := false
		for _, p := range parts {
			want = want || strings.HasPrefix(k, p)
		}
		if got := inParts([]byte(k), h); got != want {
			t.Errorf("inParts(%q) = %v, want %v", k, got, want)
		}
	}
	if !inParts([]byte(prefix+"x"), header{Prefix: prefix}) || inParts([]byte("/other"), header{Prefix: prefix}) {
		t.Error("without parts, inParts is not the prefix's test")
	}
}
