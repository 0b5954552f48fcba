// Package dirwatch watches a directory for the changes a server reloads on: it waits for a
// burst of events to go quiet before it calls back once, and can also call back at a fixed
// interval, for changes no event reports. The enforcer watches its snapshot's directory with
// it, and the xDS control plane its policy directory.
//
// A directory is watched rather than a file so that an atomic replace (a temporary file renamed
// over the old one) and Kubernetes' ConfigMap updates (a "..data" symlink swapped to a new
// directory) are seen: either may leave a watch on the file itself watching nothing.
//
// A watch follows the directory it was added on, not its path: a directory removed and made
// again, or a path through a symlink that is swapped (git-sync, a "current" release link), leaves
// it watching the old one, and no event says so. So the watch also checks, every second, which
// directory the path names; when that has changed, or the watched one was removed or renamed
// (a directory made again may have the old one's inode number), it watches the one there now
// and calls back.
package dirwatch

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
)

// checkEvery is how often the watch checks which directory Dir names.
const checkEvery = time.Second

// maxWaits bounds a burst's wait: OnChange runs after at most maxWaits × Quiet of events that
// never go quiet (a file appended to all the time), not never.
const maxWaits = 10

// dirOf is the directory path names now (following symlinks), or nil when it names none.
func dirOf(path string) os.FileInfo {
	fi, err := os.Stat(path)
	if err != nil || !fi.IsDir() {
		return nil
	}
	return fi
}

// Config says what to watch and what to do.
type Config struct {
	// Dir is the directory to watch. Required.
	Dir string
	// Relevant reports whether an event may change what the caller loads; nil counts every
	// event.
	Relevant func(fsnotify.Event) bool
	// Quiet is how long events must stop before OnChange runs (the debounce), and at most ten
	// times that from a burst's first event. Required.
	Quiet time.Duration
	// Resync, when above 0, runs OnChange("resync") at that interval, after adding the watch on
	// Dir again: a directory replaced as a whole (a checkout that swaps it) loses its watch.
	Resync time.Duration
	// OnChange is called with "change" after a quiet burst of relevant events, or once Dir
	// names another directory than the one watched; and with "resync" at each Resync.
	// Required. Calls never overlap.
	OnChange func(cause string)
	// OnError is told of the watcher's errors, such as an overflow of its event queue. Events
	// may have been lost, so OnChange("change") follows once events are quiet. nil ignores them.
	OnError func(error)
}

// Start adds the watch on c.Dir and runs it on a goroutine, counted in wg, until ctx ends. It
// returns the error of setting the watch up; a watch that starts calls no callback until a
// change.
func Start(ctx context.Context, wg *sync.WaitGroup, c Config) error {
	if c.Dir == "" || c.Quiet <= 0 || c.OnChange == nil {
		return fmt.Errorf("dirwatch: Dir, Quiet and OnChange are required")
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	if err := w.Add(c.Dir); err != nil {
		w.Close()
		return err
	}
	watched, dir := dirOf(c.Dir), filepath.Clean(c.Dir)
	var resync <-chan time.Time
	var ticker *time.Ticker
	if c.Resync > 0 {
		ticker = time.NewTicker(c.Resync)
		resync = ticker.C
	}
	check := time.NewTicker(checkEvery)
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer w.Close()
		defer check.Stop()
		if ticker != nil {
			defer ticker.Stop()
		}
		quiet := time.NewTimer(time.Hour)
		quiet.Stop()
		defer quiet.Stop()
		var burst time.Time // the first event of the burst waiting for quiet; zero when none
		wait := func() {
			now := time.Now()
			if burst.IsZero() {
				burst = now
			}
			quiet.Reset(min(c.Quiet, burst.Add(maxWaits*c.Quiet).Sub(now)))
		}
		// rewatch adds the watch on Dir again, on the directory it names now.
		rewatch := func() {
			_ = w.Remove(c.Dir) // the old directory's watch, when it has one left
			if err := w.Add(c.Dir); err != nil && c.OnError != nil {
				c.OnError(err)
			}
			watched = dirOf(c.Dir)
		}
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				if filepath.Clean(ev.Name) == dir && ev.Has(fsnotify.Remove|fsnotify.Rename) {
					// The watched directory itself went: a new one at the path may well
					// have its inode number, so that is no sign of it. Watch whatever
					// comes back.
					watched = nil
				}
				if c.Relevant == nil || c.Relevant(ev) {
					wait()
				}
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				if c.OnError != nil {
					c.OnError(err)
				}
				wait()
			case <-quiet.C:
				burst = time.Time{}
				c.OnChange("change")
			case <-check.C:
				// A directory gone is not watched again until one is back at the path.
				if now := dirOf(c.Dir); now != nil && (watched == nil || !os.SameFile(now, watched)) {
					rewatch()
					wait()
				}
			case <-resync:
				rewatch()
				c.OnChange("resync")
			}
		}
	}()
	return nil
}
