package daemon

import "github.com/sirupsen/logrus"

var log = logrus.WithField("component", "daemon")
