package ipam

import (
	"os"
	"testing"

	"github.com/sirupsen/logrus"
)

func TestMain(m *testing.M) {
	logrus.SetLevel(logrus.WarnLevel) // claims and releases log at info
	if pass := os.Getenv(gcHeapPassEnv); pass != "" {
		os.Exit(gcHeapChild(pass)) // a pass of BenchmarkGCHeap, in a process of its own
	}
	os.Exit(m.Run())
}
