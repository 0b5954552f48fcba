// Package dirwatch watches a directory for the changes a server reloads on: it waits for a
// burst of events to go quiet before it calls back once, and can also call back at a fixed
// interval, for changes no event reports. The enforcer watches its snapshot's directory with
// it, and the xDS control plane its policy directory.
//
// A directory is watched rather than a file so that an atomic replace (a temporary file renamed
// over the old one) and Kubernetes' ConfigMap updates (a "..data" symlink swapped to a new
// directory) are seen: either may leave a watch on the file itself watching nothing.
package dirwatch

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Config says what to watch and what to do.
type Config struct {
	// Dir is the directory to watch. Required.
	Dir string
	// Relevant reports whether an event may change what the caller loads; nil counts every
	// event.
	Relevant func(fsnotify.Event) bool
	// Quiet is how long events must stop before OnChange runs (the debounce). Required.
	Quiet time.Duration
	// Resync, when above 0, runs OnChange("resync") at that interval, after adding the watch on
	// Dir again: a directory replaced as a whole (a checkout that swaps it) loses its watch.
	Resync time.Duration
	// OnChange is called with "change" after a quiet burst of relevant events, and with
	// "resync" at each Resync. Required. Calls never overlap.
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
	var resync <-chan time.Time
	var ticker *time.Ticker
	if c.Resync > 0 {
		ticker = time.NewTicker(c.Resync)
		resync = ticker.C
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer w.Close()
		if ticker != nil {
			defer ticker.Stop()
		}
		quiet := time.NewTimer(time.Hour)
		quiet.Stop()
		defer quiet.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				if c.Relevant == nil || c.Relevant(ev) {
					quiet.Reset(c.Quiet)
				}
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				if c.OnError != nil {
					c.OnError(err)
				}
				quiet.Reset(c.Quiet)
			case <-quiet.C:
				c.OnChange("change")
			case <-resync:
				if err := w.Add(c.Dir); err != nil && c.OnError != nil {
					c.OnError(err)
				}
				c.OnChange("resync")
			}
		}
	}()
	return nil
}
