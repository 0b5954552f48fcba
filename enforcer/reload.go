package enforcer

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/rlctl/rlctl/internal/dirwatch"

	"github.com/rlctl/rlctl/journal"
	"github.com/rlctl/rlctl/policy"
)

// reload reads, validates and compiles the snapshot file and swaps it in atomically. On error
// the old config keeps serving. Store state lives in the store and leases in the limiter, both
// keyed by domain, rule and values, so the counters and leases of unchanged rules survive.
func (e *Enforcer) reload() error {
	if e.conf.XDSAddr != "" {
		e.log.Warn("nothing to reload: the snapshot comes from --xds, and each new version is applied when it is served",
			"xds", e.conf.XDSAddr, "version", e.ConfigVersion())
		return errors.New("enforcer: reload: the snapshot comes from --xds")
	}
	e.reloadMu.Lock()
	defer e.reloadMu.Unlock()
	return e.loadFile(false)
}

// loadFile reads the snapshot file and swaps it in; when changed is set, only if it holds
// another policy than the one serving (a watch event for a file rewritten as it was). The
// caller holds reloadMu.
func (e *Enforcer) loadFile(changed bool) error {
	raw, err := readFile(e.conf.SnapshotPath)
	if err == nil {
		// The watch's resyncs, and events that rewrote the file as it was, read the same
		// bytes again: nothing to do, whether they were served or rejected.
		sum := sha256.Sum256(raw)
		if changed && sum == e.lastRead {
			return nil
		}
		e.lastRead = sum
		var s snapshot
		if s, err = parseSnapshot(raw); err == nil {
			if changed && e.serving(s) {
				e.restored()
				return nil
			}
			if err = e.swap(s); err == nil {
				return nil
			}
		}
	} else {
		// Whatever comes back after a failed read is read again, even the same bytes:
		// restored() must get to see them.
		e.lastRead = [32]byte{}
	}
	return e.rejected(fmt.Errorf("enforcer: --config %s: %w", e.conf.SnapshotPath, err))
}

// snapshot is a policy snapshot read once: its model and its version, the model's content hash.
type snapshot struct {
	model   *policy.Model
	version string
}

func parseSnapshot(raw []byte) (snapshot, error) {
	m, err := readSnapshot(bytes.NewReader(raw))
	if err != nil {
		return snapshot{}, err
	}
	v, err := policy.ContentHash(m)
	if err != nil {
		return snapshot{}, err
	}
	return snapshot{model: m, version: v}, nil
}

// serving reports whether s is the policy serving now.
func (e *Enforcer) serving(s snapshot) bool {
	c := e.cfg.Load()
	return c != nil && c.version == s.version
}

// swap compiles s and swaps it in: the path every new snapshot takes, from the file or over
// xDS. The caller holds reloadMu.
func (e *Enforcer) swap(s snapshot) error {
	rc, err := compile(s.model, s.version, e.conf.InstanceID, e.mx, e.leasing)
	if err != nil {
		// compile made the series of the rules it reached before it failed.
		e.mx.forget(s.model, e.cfg.Load())
		return err
	}
	rc.keepMeters(e.cfg.Load())
	// The config record goes first: every decision that reads rc comes after the swap, so
	// after the record (decisions name their config by its generation).
	e.gen++
	rc.gen = e.gen
	now := e.clock.Now()
	e.journal.Write(journal.Record{Kind: journal.KindConfig, TimeMs: now, Gen: rc.gen, ConfigVersion: rc.version, Rules: rc.rules})
	old := e.cfg.Swap(rc)
	if old != nil {
		e.mx.configInfo.DeleteLabelValues(old.version)
		e.mx.forget(old.model, rc)
		e.leasing.retain(rc.model, old.model)
	}
	e.loadedAt.Store(now)
	e.mx.configInfo.WithLabelValues(rc.version).Set(1)
	e.mx.configVer.Set(float64(now) / 1000)
	e.mx.reloads.WithLabelValues("ok").Inc()
	e.mx.reloadOK.Set(1)
	e.lastFailed = false
	if old != nil {
		e.log.Info("config reloaded", "version", rc.version, "previous", old.version, "rules", rc.rules)
	}
	return nil
}

// restored notes that a snapshot that loads is the one serving: after a rejected one (a bad
// push reverted to what was serving), the last reload is a success again, or
// rate_limit_config_last_reload_successful and its alert would stay at 0 until another version
// came. The caller holds reloadMu.
func (e *Enforcer) restored() {
	if e.lastFailed {
		e.lastFailed = false
		e.mx.reloadOK.Set(1)
		e.log.Info("config restored: the snapshot is the one serving, after a rejected one", "version", e.ConfigVersion())
	}
}

// rejected counts and logs a snapshot that did not load, and returns err. The caller holds
// reloadMu.
func (e *Enforcer) rejected(err error) error {
	e.mx.reloads.WithLabelValues("error").Inc()
	e.mx.reloadOK.Set(0)
	e.lastFailed = true
	if c := e.cfg.Load(); c != nil {
		e.log.Error("config reload rejected; the previous config keeps serving", "error", err.Error(),
			"version", c.version)
	}
	return err
}

// watchResync is how often the --config watch reads the snapshot again, in case a change went
// unseen.
const watchResync = 30 * time.Second

// watch reloads the snapshot when it changes. It watches the file's directory, so that an
// atomic replace (write a temporary file, rename it over) and Kubernetes ConfigMap symlink
// swaps are seen, and waits for 100ms of quiet before reloading a burst of events.
func (e *Enforcer) watch(ctx context.Context) error {
	path, err := filepath.Abs(e.conf.SnapshotPath)
	if err != nil {
		return fmt.Errorf("enforcer: watching --config: %w", err)
	}
	err = dirwatch.Start(ctx, &e.wg, dirwatch.Config{
		Dir: filepath.Dir(path),
		// The file, written in place or renamed over (an atomic replace ends in an event of
		// its name), or the symlink through which a ConfigMap swaps its files (..data).
		// Other files' events were counted too: one written to all the time held reloads
		// off. A directory replaced as a whole is dirwatch's own check.
		Relevant: func(ev fsnotify.Event) bool {
			return filepath.Clean(ev.Name) == path || filepath.Base(ev.Name) == "..data"
		},
		Quiet: 100 * time.Millisecond,
		// In case a change went unseen: an unchanged file costs a read and a hash.
		Resync: watchResync,
		OnChange: func(string) {
			e.reloadMu.Lock()
			defer e.reloadMu.Unlock()
			_ = e.loadFile(true)
		},
		OnError: func(err error) { e.log.Error("watching --config", "error", err) },
	})
	if err != nil {
		return fmt.Errorf("enforcer: watching --config: %w", err)
	}
	return nil
}
