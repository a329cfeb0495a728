package plugin

import (
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/sirupsen/logrus"
)

// testCall is an invocation with stdin, as begin would set it up.
func testCall(t *testing.T, stdin string) *call {
	t.Helper()
	conf, err := ParseNetConf([]byte(stdin))
	if err != nil {
		t.Fatal(err)
	}
	return &call{args: &skel.CmdArgs{ContainerID: "c1", IfName: "eth0", StdinData: []byte(stdin)}, conf: conf,
		node: "n1", log: logrus.NewEntry(logrus.New())}
}
