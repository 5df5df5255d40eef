package lab

import (
	"fmt"
	"path/filepath"
)

// BuildFlags are the -ldflags of a bftrainer binary built for a test. Every
// path compiled in lies below dir: the configuration file (config; "" for
// dir/etc/bftrainer/bftrainer.toml), the built-in hooks.log (hookLog; ""
// for dir/var/log/bftrainer/hooks.log), and the defaults of every path of
// the configuration — database, journal fallback, spool, registry,
// Trainer logs, runner state (main.localStateDir is dir/var,
// main.runStateDir dir/run). A test whose configuration leaves a path out,
// or does not load (the hooks then fall back to the built-in paths), so
// writes nothing into the system's /etc, /var or /run: another install's,
// perhaps.
func BuildFlags(dir, config, hookLog string) string {
	if config == "" {
		config = filepath.Join(dir, "etc", "bftrainer", "bftrainer.toml")
	}
	flags := fmt.Sprintf("-X main.defaultConfig=%s -X main.localStateDir=%s -X main.runStateDir=%s",
		config, filepath.Join(dir, "var"), filepath.Join(dir, "run"))
	if hookLog != "" {
		flags += " -X main.defaultHookLog=" + hookLog
	}
	return flags
}
