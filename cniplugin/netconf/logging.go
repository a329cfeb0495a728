package netconf

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/sirupsen/logrus"
	"gopkg.in/natefinch/lumberjack.v2"
)

// Log rotation defaults, as Calico's CNI plugin: 100 MB, 30 days, 10 files.
const (
	DefaultLogFileMaxSize  = 100
	DefaultLogFileMaxAge   = 30
	DefaultLogFileMaxCount = 10
)

func orDefault(v, def int) int {
	if v > 0 {
		return v
	}
	return def
}

// openLogFile returns a rotating writer for path (lumberjack: rotated by
// size, old files pruned by age and count). A path that is a symlink is
// refused: the plugin runs as root and would append to whatever the link
// names.
func openLogFile(conf *NetConf, path string) (io.WriteCloser, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, err
	}
	if st, err := os.Lstat(path); err == nil && !st.Mode().IsRegular() {
		return nil, fmt.Errorf("log file %s is not a regular file (a symlink?): not following it", path)
	}
	return &lumberjack.Logger{
		Filename:   path,
		MaxSize:    orDefault(conf.LogFileMaxSize, DefaultLogFileMaxSize),
		MaxAge:     orDefault(conf.LogFileMaxAge, DefaultLogFileMaxAge),
		MaxBackups: orDefault(conf.LogFileMaxCount, DefaultLogFileMaxCount),
	}, nil
}

// OpenLog returns a logger for one invocation that writes to the
// configured log file (created 0600: it names pods and addresses), with
// the container ID on every line. If the file cannot be opened the plugin
// logs to stderr instead: logging must never fail a pod.
func OpenLog(conf *NetConf, containerID, verb string) (*logrus.Entry, func()) {
	l := logrus.New()
	l.SetFormatter(&logrus.TextFormatter{FullTimestamp: true, DisableColors: true})
	level := logrus.InfoLevel
	var badLevel bool
	if conf.LogLevel != "" {
		lv, err := logrus.ParseLevel(strings.ToLower(conf.LogLevel))
		if err == nil {
			level = lv
		} else {
			badLevel = true
		}
	}
	l.SetLevel(level)
	closeFn := func() {}
	path := conf.LogFilePath
	if path == "" {
		path = DefaultLogFile
	}
	var out io.Writer = os.Stderr
	f, logErr := openLogFile(conf, path)
	if logErr == nil {
		out = f
		if exe, err := os.Executable(); err == nil {
			out = whileInstalled{w: f, exe: exe}
		}
		closeFn = func() { _ = f.Close() }
	}
	l.SetOutput(out)
	fields := logrus.Fields{"containerID": containerID, "verb": verb}
	e := l.WithFields(fields)
	// Libraries (datastore, ipam) log through the standard logger: send
	// it to the same place, stamped with the same fields.
	std := logrus.StandardLogger()
	std.SetOutput(out)
	std.SetLevel(level)
	std.SetFormatter(l.Formatter)
	std.ReplaceHooks(logrus.LevelHooks{})
	std.AddHook(fieldHook(fields))
	if logErr != nil {
		e.WithError(logErr).Warn("cannot open the log file; logging to stderr")
	}
	if badLevel {
		e.Warnf("log_level %q is not a level (debug, info, warning, error); using info", conf.LogLevel)
	}
	return e, closeFn
}

// fieldHook adds fixed fields to every entry that does not set them.
type fieldHook logrus.Fields

func (h fieldHook) Levels() []logrus.Level { return logrus.AllLevels }

func (h fieldHook) Fire(e *logrus.Entry) error {
	for k, v := range h {
		if _, ok := e.Data[k]; !ok {
			e.Data[k] = v
		}
	}
	return nil
}

// whileInstalled writes to w only while the plugin's own executable is
// in place, to stderr (the runtime's log) once it is gone: a plugin still
// running when routed is uninstalled (an ADD or DEL that waited for
// routed to come back) must not create its log file again behind the
// uninstall, which removed it (routed/daemon's uninstallFiles). The log
// file is created on its first write, so a plugin uninstalled before it
// logged creates none.
type whileInstalled struct {
	w   io.Writer
	exe string
}

func (wi whileInstalled) Write(p []byte) (int, error) {
	if _, err := os.Stat(wi.exe); err != nil {
		return os.Stderr.Write(p)
	}
	return wi.w.Write(p)
}
