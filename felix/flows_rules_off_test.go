package felix_test

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/routed-net/routed/felix"
	"github.com/routed-net/routed/felix/internal/nstest"
	"github.com/routed-net/routed/felix/policy/flowrec"
)

// TestFlowRulesRemovedWithFlowsOff: the generation rules a routed with
// --flows-source poll left (table inet routed-flows, with a rule that
// marks every new connection) are removed by a felix that runs the
// policy without flows; another table stays.
func TestFlowRulesRemovedWithFlowsOff(t *testing.T) {
	var path string
	nft := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("nsenter", append([]string{"--net=" + path, "nft"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("nft %v: %v: %s", args, err, out)
		}
		return string(out)
	}
	h := newHarness(t, func(c *felix.Config) {
		c.Features.DisablePolicy = false
		path = c.NetNSPath
		nft("add", "table", "inet", flowrec.GenTable)
		nft("add", "chain", "inet", flowrec.GenTable, "postrouting", "{ type filter hook postrouting priority 300; }")
		nft("add", "rule", "inet", flowrec.GenTable, "postrouting", "ct", "state", "new", "ct", "mark", "set", "0x1000000")
		nft("add", "table", "inet", "someone-else")
	})
	nstest.Eventually(t, 10*time.Second, func() string {
		if tables := nft("list", "tables"); strings.Contains(tables, flowrec.GenTable) || !strings.Contains(tables, "someone-else") {
			return "want table inet " + flowrec.GenTable + " gone and someone-else kept:\n" + tables
		}
		return ""
	})
	nstest.Eventually(t, 10*time.Second, func() string {
		for _, e := range h.logs.AllEntries() {
			if strings.Contains(e.Message, "removed the flow records' generation rules") {
				return ""
			}
		}
		return "no log line saying the generation rules were removed"
	})
}
