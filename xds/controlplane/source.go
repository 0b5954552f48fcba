package controlplane

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/rlctl/rlctl/internal/dirwatch"

	"github.com/rlctl/rlctl/lint"
	"github.com/rlctl/rlctl/policy"
	"github.com/rlctl/rlctl/schema"
	"github.com/rlctl/rlctl/xds"
)

// load loads the policy directory as rlctl render does and builds the resources to serve. A
// policy that does not load gives policy.Problems (schema.Problems is the same type), every
// problem positioned in the user's files.
func load(dir string) (*resources, error) {
	m, err := schema.Load(dir)
	if err != nil {
		return nil, err
	}
	// What the enforcer would refuse to load is a policy problem here too.
	if probs := lint.EngineProblems(m); len(probs) > 0 {
		return nil, probs
	}
	return buildResources(m)
}

// Reload loads the directory again, as a change to it would (rlctl serve-xds does on SIGHUP),
// and returns what happened: "served", "unchanged" or "refused".
func (s *Server) Reload(cause string) string { return s.reload(cause) }

// reload loads the directory again and serves it if it loaded and changed; otherwise the last
// good version keeps being served. It returns what happened: "served", "unchanged" or "refused".
func (s *Server) reload(cause string) string {
	s.loadMu.Lock()
	defer s.loadMu.Unlock()
	start := time.Now()
	r, err := load(s.conf.PolicyDir)
	if err != nil {
		s.mx.loads.WithLabelValues("refused").Inc()
		attrs := []any{"policies", s.conf.PolicyDir, "cause", cause, "version", s.Version()}
		var probs policy.Problems
		if errors.As(err, &probs) {
			lines := make([]string, len(probs))
			for i, p := range probs {
				lines[i] = p.String()
			}
			attrs = append(attrs, "problems", lines)
		} else {
			attrs = append(attrs, "error", err.Error())
		}
		s.log.Error("policy change refused; the last good version keeps being served", attrs...)
		s.failed(true)
		return "refused"
	}
	old := s.cur.Load()
	if r.sameAs(old) {
		s.mx.loads.WithLabelValues("unchanged").Inc()
		if s.failed(false) {
			s.log.Info("policy restored: the directory loads again, as the version being served", "cause", cause, "version", s.Version())
		} else {
			s.log.Debug("policy unchanged", "cause", cause, "version", s.Version())
		}
		return "unchanged"
	}
	if err := s.serve(r); err != nil {
		s.mx.loads.WithLabelValues("refused").Inc()
		s.log.Error("policy change not served", "error", err.Error())
		s.failed(true)
		return "refused"
	}
	s.failed(false)
	s.mx.loads.WithLabelValues("served").Inc()
	s.log.Info("policy change served", "cause", cause, "version", r.version(xds.SnapshotTypeURL),
		"previous", old.version(xds.SnapshotTypeURL), "domains", len(r.model.Domains),
		"load_ms", time.Since(start).Milliseconds())
	return "served"
}

// failed records whether the last load was refused, in rlctl_xds_policy_last_load_successful,
// and reports whether the one before it was. The caller holds loadMu.
func (s *Server) failed(now bool) (before bool) {
	before, s.lastFailed = s.lastFailed, now
	if now {
		s.mx.lastOK.Set(0)
	} else {
		s.mx.lastOK.Set(1)
	}
	return before
}

// watch reloads the directory after each burst of changes to it, and every Config.Resync. A
// watcher error (an overflow loses events) is logged and followed by a reload.
func (s *Server) watch(ctx context.Context) error {
	err := dirwatch.Start(ctx, &s.wg, dirwatch.Config{
		Dir:      s.conf.PolicyDir,
		Relevant: func(ev fsnotify.Event) bool { return relevant(ev.Name) },
		Quiet:    s.conf.Debounce,
		Resync:   s.conf.Resync,
		OnChange: func(cause string) { s.reload(cause) },
		OnError:  func(err error) { s.log.Error("watching --policies", "error", err.Error()) },
	})
	if err != nil {
		return fmt.Errorf("xds: watching --policies: %w", err)
	}
	return nil
}

// relevant reports whether an event on name may change the policy: a .cue file (written in
// place, or renamed over by an editor), or the "..data" symlink through which Kubernetes swaps a
// mounted ConfigMap's files. Editors' swap and backup files are not.
func relevant(name string) bool {
	base := filepath.Base(name)
	return strings.HasSuffix(base, ".cue") || base == "..data"
}
