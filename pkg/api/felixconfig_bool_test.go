package api_test

import (
	"strings"
	"testing"

	"github.com/routed-net/routed/pkg/api"
)

// TestRefusedBooleansAsStrings: a refused boolean written as a string
// ("true") is refused as not a boolean, never passed over as if it were
// false (wireguardEnabled: "true" would otherwise mean clear text
// without a word).
func TestRefusedBooleansAsStrings(t *testing.T) {
	for f, v := range map[string]string{
		"bpfEnabled":  `"True"`,
		"ipipEnabled": `"false"`, "vxlanEnabled": `"false"`, "routeSyncDisabled": `"true"`, "useInternalDataplaneDriver": `"yes"`,
	} {
		doc := "apiVersion: projectcalico.org/v3\nkind: FelixConfiguration\nmetadata: {name: default}\nspec:\n  " + f + ": " + v + "\n"
		_, err := api.Decode([]byte(doc))
		if err == nil || !strings.Contains(err.Error(), f) || !strings.Contains(err.Error(), "must be true or false") {
			t.Errorf("%s: %s: %v, want refused as not a boolean", f, v, err)
		}
	}
	for f, v := range map[string]string{"bpfEnabled": "false", "ipipEnabled": "true", "routeSyncDisabled": "false"} {
		doc := "apiVersion: projectcalico.org/v3\nkind: FelixConfiguration\nmetadata: {name: default}\nspec:\n  " + f + ": " + v + "\n"
		if _, err := api.Decode([]byte(doc)); err != nil {
			t.Errorf("%s: %s (routed's own value): %v", f, v, err)
		}
	}
}
