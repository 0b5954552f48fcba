package dirwatch

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
)

// start watches dir with c, sending OnChange's causes to the returned channel, and stops the
// watch when the test ends.
func start(t *testing.T, c Config) <-chan string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	causes := make(chan string, 100)
	c.OnChange = func(cause string) { causes <- cause }
	if err := Start(ctx, &wg, c); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		wg.Wait() // the watch's goroutine ends with its context
	})
	return causes
}

func write(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// expect waits for one cause on causes, and then for quiet: no other within d.
func expect(t *testing.T, causes <-chan string, want string, d time.Duration) {
	t.Helper()
	select {
	case got := <-causes:
		if got != want {
			t.Fatalf("OnChange(%q), want %q", got, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no OnChange(%q)", want)
	}
	select {
	case got := <-causes:
		t.Fatalf("OnChange(%q) again, within %v of the first", got, d)
	case <-time.After(d):
	}
}

// A burst of relevant writes is one change, after the quiet; irrelevant writes are none.
func TestBurstIsOneChange(t *testing.T) {
	dir := t.TempDir()
	const quiet = 200 * time.Millisecond
	causes := start(t, Config{Dir: dir, Quiet: quiet,
		Relevant: func(ev fsnotify.Event) bool { return strings.HasSuffix(ev.Name, ".cue") }})
	for i := range 20 {
		write(t, filepath.Join(dir, "a.cue"), strings.Repeat("x", i))
	}
	expect(t, causes, "change", 3*quiet)

	write(t, filepath.Join(dir, "a.cue~"), "backup")
	write(t, filepath.Join(dir, ".a.cue.swp"), "swap")
	select {
	case got := <-causes:
		t.Fatalf("OnChange(%q) after irrelevant writes", got)
	case <-time.After(3 * quiet):
	}

	// A rename over the file, as an atomic replace does.
	tmp := filepath.Join(dir, "tmp")
	write(t, tmp, "new")
	if err := os.Rename(tmp, filepath.Join(dir, "a.cue")); err != nil {
		t.Fatal(err)
	}
	expect(t, causes, "change", 3*quiet)
}

// Resync calls back at its interval with no event at all.
func TestResync(t *testing.T) {
	causes := start(t, Config{Dir: t.TempDir(), Quiet: time.Second, Resync: 50 * time.Millisecond})
	for range 3 {
		select {
		case got := <-causes:
			if got != "resync" {
				t.Fatalf("OnChange(%q), want resync", got)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no resync")
		}
	}
}

// A watch that cannot start says why, and starts no goroutine.
func TestStartErrors(t *testing.T) {
	var wg sync.WaitGroup
	noop := func(string) {}
	for _, c := range []Config{
		{Dir: filepath.Join(t.TempDir(), "missing"), Quiet: time.Second, OnChange: noop},
		{Quiet: time.Second, OnChange: noop},
		{Dir: t.TempDir(), OnChange: noop},
		{Dir: t.TempDir(), Quiet: time.Second},
	} {
		if err := Start(context.Background(), &wg, c); err == nil {
			t.Errorf("%+v: started", c)
		}
	}
	wg.Wait()
}

// A directory removed and made again, and a path through a symlink that is swapped (git-sync, a
// "current" release link), leave the watch on the old directory with no event to say so: the
// watch finds out within a second or so, calls back, and then sees writes in the new directory.
// Both went unseen for good (an enforcer kept its old snapshot) or until a resync.
func TestDirectoryReplaced(t *testing.T) {
	const quiet = 50 * time.Millisecond
	t.Run("remade", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "snap")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		causes := start(t, Config{Dir: dir, Quiet: quiet})
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		drain(causes, 3*checkEvery)
		write(t, filepath.Join(dir, "a"), "x")
		expect(t, causes, "change", 3*quiet)
	})
	t.Run("symlink", func(t *testing.T) {
		root := t.TempDir()
		for _, d := range []string{"v1", "v2"} {
			if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		current := filepath.Join(root, "current")
		if err := os.Symlink("v1", current); err != nil {
			t.Fatal(err)
		}
		causes := start(t, Config{Dir: current, Quiet: quiet})
		tmp := filepath.Join(root, "current.tmp")
		if err := os.Symlink("v2", tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, current); err != nil {
			t.Fatal(err)
		}
		expect(t, causes, "change", 3*quiet) // the swap itself
		write(t, filepath.Join(root, "v2", "a"), "x")
		expect(t, causes, "change", 3*quiet)
	})
}

// drain discards causes until none has come for d.
func drain(causes <-chan string, d time.Duration) {
	for {
		select {
		case <-causes:
		case <-time.After(d):
			return
		}
	}
}

// Writes that never go quiet still call back, ten quiet periods after the first: the debounce
// waited for as long as they went on.
func TestEndlessWritesCallBack(t *testing.T) {
	dir := t.TempDir()
	const quiet = 100 * time.Millisecond
	causes := start(t, Config{Dir: dir, Quiet: quiet})
	stop := time.After(3 * maxWaits * quiet)
	for i := 0; ; i++ {
		select {
		case got := <-causes:
			if got != "change" {
				t.Fatalf("OnChange(%q), want change", got)
			}
			return
		case <-stop:
			t.Fatalf("no OnChange in %v of writes every %v", 3*maxWaits*quiet, quiet/5)
		case <-time.After(quiet / 5):
			write(t, filepath.Join(dir, "a"), strings.Repeat("x", i))
		}
	}
}
