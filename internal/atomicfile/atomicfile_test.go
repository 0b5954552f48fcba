package atomicfile

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out.json")
	for _, content := range []string{"first\n", "second\n"} {
		if err := Write(path, func(w io.Writer) error { _, err := io.WriteString(w, content); return err }); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != content {
			t.Fatalf("got %q, %v, want %q", got, err, content)
		}
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("got mode %v, %v, want 0644", fi.Mode(), err)
	}
}

func TestWriteErrors(t *testing.T) {
	dir := t.TempDir()
	failing := errors.New("encoder failed")
	tests := []struct {
		name  string
		path  string
		write func(io.Writer) error
		want  string
		is    error
	}{
		{"missing directory", filepath.Join(dir, "nope", "x.json"), nil,
			filepath.Join(dir, "nope", "x.json") + ": cannot create a file in " + filepath.Join(dir, "nope") + ": no such file or directory", fs.ErrNotExist},
		{"directory", dir, nil, dir + ": is a directory", nil},
		{"writer fails", filepath.Join(dir, "y.json"), func(io.Writer) error { return failing }, filepath.Join(dir, "y.json") + ": encoder failed", failing},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := tt.write
			if w == nil {
				w = func(io.Writer) error { return nil }
			}
			err := Write(tt.path, w)
			var e *Error
			if !errors.As(err, &e) || err.Error() != tt.want {
				t.Fatalf("got %v, want %s", err, tt.want)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("got %v, want it to wrap %v", err, tt.is)
			}
			if strings.Contains(err.Error(), ".tmp") {
				t.Errorf("got %v, which names the temporary file", err)
			}
		})
	}
	// Nothing is left behind.
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		t.Errorf("got %s left in the directory, want nothing", e.Name())
	}
}

// A file replaced keeps its mode; a symbolic link stays one, and its target is replaced, also
// when the target does not exist yet.
func TestWriteKeepsModeAndLinks(t *testing.T) {
	dir := t.TempDir()
	put := func(path, content string) {
		t.Helper()
		if err := Write(path, func(w io.Writer) error { _, err := io.WriteString(w, content); return err }); err != nil {
			t.Fatal(err)
		}
	}
	private := filepath.Join(dir, "private.json")
	if err := os.WriteFile(private, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	put(private, "new")
	if fi, err := os.Stat(private); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("a 0600 file replaced: got mode %v, %v, want 0600", fi.Mode(), err)
	}

	target := filepath.Join(dir, "target.json")
	if err := os.WriteFile(target, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.json")
	if err := os.Symlink("target.json", link); err != nil {
		t.Fatal(err)
	}
	put(link, "through the link")
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		t.Errorf("the link: got %v, %v, want a symbolic link still", fi.Mode(), err)
	}
	if got, _ := os.ReadFile(target); string(got) != "through the link" {
		t.Errorf("the link's target holds %q, want what was written", got)
	}

	dangling := filepath.Join(dir, "dangling.json")
	if err := os.Symlink(filepath.Join(dir, "later.json"), dangling); err != nil {
		t.Fatal(err)
	}
	put(dangling, "made")
	if got, _ := os.ReadFile(filepath.Join(dir, "later.json")); string(got) != "made" {
		t.Errorf("a dangling link's target holds %q, want it made", got)
	}
	if fi, err := os.Lstat(dangling); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		t.Errorf("the dangling link: got %v, %v, want a symbolic link still", fi.Mode(), err)
	}
}

// TestWriteFiles: every file is replaced, keeping its mode; when one cannot be written, none is,
// and no temporary file is left behind.
func TestWriteFiles(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.cue"), filepath.Join(dir, "b.cue")
	if err := os.WriteFile(a, []byte("a0"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(b, []byte("b0"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteFiles([]string{a, b}, [][]byte{[]byte("a1"), []byte("b1")}); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]string{a: "a1", b: "b1"} {
		if got, _ := os.ReadFile(p); string(got) != want {
			t.Errorf("%s: got %q, want %q", p, got, want)
		}
	}
	if fi, _ := os.Stat(a); fi.Mode().Perm() != 0o600 {
		t.Errorf("a.cue: mode %v, want 0600", fi.Mode().Perm())
	}

	// The second file's directory does not exist: the first is not replaced either.
	missing := filepath.Join(dir, "no", "c.cue")
	err := WriteFiles([]string{a, missing}, [][]byte{[]byte("a2"), []byte("c2")})
	var e *Error
	if !errors.As(err, &e) || e.Path != missing {
		t.Fatalf("a file in a missing directory: got %v, want an *Error naming %s", err, missing)
	}
	if got, _ := os.ReadFile(a); string(got) != "a1" {
		t.Errorf("a.cue after the failed write: got %q, want it unchanged, %q", got, "a1")
	}
	entries, _ := os.ReadDir(dir)
	for _, en := range entries {
		if strings.Contains(en.Name(), ".tmp") {
			t.Errorf("temporary file %s left behind", en.Name())
		}
	}
}
