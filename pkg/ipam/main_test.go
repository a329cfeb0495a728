package ipam

import (
	"os"
	"testing"

	"github.com/sirupsen/logrus"
)

func TestMain(m *testing.M) {
	logrus.SetLevel(logrus.WarnLevel) // claims and releases log at info
	os.Exit(m.Run())
}
