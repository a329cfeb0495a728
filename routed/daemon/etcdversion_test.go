package daemon

import (
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
	"github.com/sirupsen/logrus/hooks/test"

	"github.com/routed-net/routed/pkg/datastore"
)

func TestLogEtcdVersion(t *testing.T) {
	logger, hook := test.NewNullLogger()
	log := logrus.NewEntry(logger)
	logEtcdVersion(log, datastore.ServerVersion{Endpoint: "https://etcd-1:2379", Version: "3.5.12", Old: true})
	logEtcdVersion(log, datastore.ServerVersion{Endpoint: "https://etcd-2:2379", Version: "3.6.16"})
	es := hook.AllEntries()
	if len(es) != 2 {
		t.Fatalf("%d entries", len(es))
	}
	if es[0].Level != logrus.WarnLevel || es[0].Data["endpoint"] != "https://etcd-1:2379" || es[0].Data["version"] != "3.5.12" ||
		!strings.Contains(es[0].Message, "older than 3.5.13") {
		t.Errorf("old etcd: %v %v %q", es[0].Level, es[0].Data, es[0].Message)
	}
	if es[1].Level != logrus.InfoLevel || es[1].Data["version"] != "3.6.16" {
		t.Errorf("current etcd: %v %v %q", es[1].Level, es[1].Data, es[1].Message)
	}
}
