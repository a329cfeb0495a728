package cnpconf

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// TestReadEvents reads go test2json output shaped like the suite's: the
// direct subtests of TestConformance are sorted by how they ended, a
// sub-subtest's failure belongs to its test and keeps its poke lines, a
// skip carries the suite's reason, TestConformance failing because a
// subtest failed is not a setup failure, and the SCTP pokes not made
// are kept with their test and counted in the summary.
func TestReadEvents(t *testing.T) {
	in := strings.Join([]string{
		`{"Action":"run","Test":"TestConformance"}`,
		`{"Action":"output","Test":"TestConformance","Output":"Test Setup: Applying base manifests\n"}`,
		`{"Action":"run","Test":"TestConformance/CNPAdminTierIngressTCP"}`,
		`{"Action":"output","Test":"TestConformance/CNPAdminTierIngressTCP/Should_support_deny","Output":"    helper.go:96: FAILED to execute command /agnhost connect 10.1.2.3:80 on pod a/b\n"}`,
		`{"Action":"output","Test":"TestConformance/CNPAdminTierIngressTCP/Should_support_deny","Output":"    helper.go:120: expected connection to fail, it succeeded\n"}`,
		`{"Action":"fail","Test":"TestConformance/CNPAdminTierIngressTCP/Should_support_deny","Elapsed":3}`,
		`{"Action":"fail","Test":"TestConformance/CNPAdminTierIngressTCP","Elapsed":12.5}`,
		`{"Action":"output","Test":"TestConformance/CNPAdminTierGress/Should_x","Output":"    helper.go:73: ` + PokeNotMade + ` network-policy-conformance-gryffindor/harry-potter-0 -> 10.1.2.3:9003 over sctp, expected to connect (this kernel has no SCTP)\n"}`,
		`{"Action":"output","Test":"TestConformance/CNPAdminTierGress/Should_y","Output":"    helper.go:73: ` + PokeNotMade + ` network-policy-conformance-slytherin/draco-malfoy-1 -> 10.1.2.4:9005 over sctp, expected to be dropped (this kernel has no SCTP)\n"}`,
		`{"Action":"pass","Test":"TestConformance/CNPAdminTierGress/Should_x","Elapsed":2}`,
		`{"Action":"pass","Test":"TestConformance/CNPAdminTierGress/Should_y","Elapsed":2}`,
		`{"Action":"pass","Test":"TestConformance/CNPAdminTierPodSelector","Elapsed":20}`,
		`{"Action":"pass","Test":"TestConformance/CNPAdminTierGress","Elapsed":20}`,
		`{"Action":"output","Test":"TestConformance/CNPAdminTierEgressNodePeers","Output":"    suite.go:222: Skipping CNPAdminTierEgressNodePeers: suite does not support ClusterNetworkPolicyEgressNodePeers\n"}`,
		`{"Action":"skip","Test":"TestConformance/CNPAdminTierEgressNodePeers","Elapsed":0}`,
		`{"Action":"fail","Test":"TestConformance","Elapsed":40}`,
		`not json`,
	}, "\n")
	var progress []string
	res := readEvents(strings.NewReader(in), func(f string, a ...any) { progress = append(progress, fmt.Sprintf(f, a...)) })
	if !slices.Contains(progress, "PASS [20s] CNPAdminTierGress (without its 2 SCTP pokes)") || !slices.Contains(progress, "PASS [20s] CNPAdminTierPodSelector") {
		t.Errorf("progress: %q", progress)
	}
	if got := res.Summary(); got != "cnp: 2 passed (1 of them without their 2 SCTP pokes), 1 failed, 1 skipped" {
		t.Fatalf("%s", got)
	}
	if f := res.Failed[0]; f.Name != "CNPAdminTierIngressTCP" || !strings.Contains(f.Message, "expected connection to fail") || f.Duration.Seconds() != 12.5 {
		t.Errorf("failure: %+v", f)
	}
	if s := res.Skipped[0]; !strings.Contains(s.Message, "does not support ClusterNetworkPolicyEgressNodePeers") {
		t.Errorf("skip: %+v", s)
	}
	if res.Setup != "" {
		t.Errorf("setup failure from a subtest's: %q", res.Setup)
	}
	gress := res.Passed[0]
	if gress.Name != "CNPAdminTierGress" || len(gress.NotMade) != 2 ||
		gress.NotMade[1] != PokeNotMade+" network-policy-conformance-slytherin/draco-malfoy-1 -> 10.1.2.4:9005 over sctp, expected to be dropped (this kernel has no SCTP)" {
		t.Errorf("pokes not made: %q", gress.NotMade)
	}
	if len(res.Passed[1].NotMade)+len(res.Failed[0].NotMade) != 0 {
		t.Errorf("pokes not made in tests that made them all: %+v", res)
	}
	failedToo := Result{Failed: []Spec{{Name: "A", NotMade: []string{"x"}}, {Name: "B"}}}
	if got := failedToo.Summary(); got != "cnp: 0 passed, 2 failed (1 of them without their 1 SCTP pokes), 0 skipped" {
		t.Errorf("%s", got)
	}
	setup := readEvents(strings.NewReader(`{"Action":"output","Test":"TestConformance","Output":"pods not ready\n"}`+"\n"+
		`{"Action":"fail","Test":"TestConformance","Elapsed":300}`), nil)
	if !strings.Contains(setup.Setup, "pods not ready") {
		t.Errorf("setup: %+v", setup)
	}
}

// TestNoSCTP: the base manifests' SCTP servers no longer serve SCTP,
// the rest of a porter container is unchanged.
func TestNoSCTP(t *testing.T) {
	in := "command: [\"/bin/bash\", \"-c\", \"/agnhost porter\"]\n env:\n - name: SERVE_SCTP_PORT_9003\n   value: \"foo\"\n"
	out := noSCTP(in)
	if strings.Contains(out, "SERVE_SCTP_PORT_") || !strings.Contains(out, "/agnhost porter") || !strings.Contains(out, "UNSERVED_SCTP_PORT_9003") {
		t.Errorf("%s", out)
	}
}
