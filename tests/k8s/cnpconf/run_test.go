package cnpconf

import (
	"strings"
	"testing"
)

// TestReadEvents reads go test2json output shaped like the suite's: the
// direct subtests of TestConformance are sorted by how they ended, a
// sub-subtest's failure belongs to its test and keeps its poke lines, a
// skip carries the suite's reason, and TestConformance failing because
// a subtest failed is not a setup failure.
func TestReadEvents(t *testing.T) {
	in := strings.Join([]string{
		`{"Action":"run","Test":"TestConformance"}`,
		`{"Action":"output","Test":"TestConformance","Output":"Test Setup: Applying base manifests\n"}`,
		`{"Action":"run","Test":"TestConformance/CNPAdminTierIngressTCP"}`,
		`{"Action":"output","Test":"TestConformance/CNPAdminTierIngressTCP/Should_support_deny","Output":"    helper.go:96: FAILED to execute command /agnhost connect 10.1.2.3:80 on pod a/b\n"}`,
		`{"Action":"output","Test":"TestConformance/CNPAdminTierIngressTCP/Should_support_deny","Output":"    helper.go:120: expected connection to fail, it succeeded\n"}`,
		`{"Action":"fail","Test":"TestConformance/CNPAdminTierIngressTCP/Should_support_deny","Elapsed":3}`,
		`{"Action":"fail","Test":"TestConformance/CNPAdminTierIngressTCP","Elapsed":12.5}`,
		`{"Action":"pass","Test":"TestConformance/CNPAdminTierGress/Should_x","Elapsed":2}`,
		`{"Action":"pass","Test":"TestConformance/CNPAdminTierGress","Elapsed":20}`,
		`{"Action":"output","Test":"TestConformance/CNPAdminTierEgressNodePeers","Output":"    suite.go:222: Skipping CNPAdminTierEgressNodePeers: suite does not support ClusterNetworkPolicyEgressNodePeers\n"}`,
		`{"Action":"skip","Test":"TestConformance/CNPAdminTierEgressNodePeers","Elapsed":0}`,
		`{"Action":"fail","Test":"TestConformance","Elapsed":40}`,
		`not json`,
	}, "\n")
	res := readEvents(strings.NewReader(in), nil)
	if got := res.Summary(); got != "cnp: 1 passed, 1 failed, 1 skipped" {
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
	if res.Failed[0].SCTPOnly {
		t.Error("a failure without a failed poke counted as SCTP only")
	}
	tcp := "    helper.go:106: FAILED Command was [/agnhost connect --timeout=3s --protocol=tcp 192.168.0.193:80]\n"
	sctp := "    helper.go:71: FAILED Command was [/agnhost connect --timeout=3s --protocol=sctp 192.168.0.193:9003]\n"
	if !sctpOnly(sctp+sctp) || sctpOnly(sctp+tcp) || sctpOnly("") {
		t.Error("sctpOnly")
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
