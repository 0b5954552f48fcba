package docgen

import (
	"os"
	"path/filepath"
	"testing"
)

func TestReplaceBlock(t *testing.T) {
	begin, end := beginMarker("m"), endMarker("m")
	for i, tc := range []struct {
		doc, want string
		ok        bool
	}{
		{"a\n" + begin + end + "b\n", "a\n" + begin + "new\n" + end + "b\n", true},
		{"a\n" + begin + "old\nlines\n" + end, "a\n" + begin + "new\n" + end, true},
		{"a\n" + end + begin, "", false},
		{"a\n" + begin, "", false},
		{begin + end + begin + end, "", false},
	} {
		got, err := ReplaceBlock([]byte(tc.doc), "m", []byte("new\n"))
		if (err == nil) != tc.ok || string(got) != tc.want {
			t.Errorf("case %d: got %q, %v; want %q, ok %v", i, got, err, tc.want, tc.ok)
		}
	}
}

func TestStale(t *testing.T) {
	committed, fresh := t.TempDir(), t.TempDir()
	write := func(dir, name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(committed, "x_same.md", "1")
	write(fresh, "x_same.md", "1")
	write(committed, "x_changed.md", "old")
	write(fresh, "x_changed.md", "new")
	write(fresh, "x_new.md", "1")
	write(committed, "x_gone.md", "1")
	write(committed, "other.md", "not matched")
	got, err := Stale(committed, fresh, "x_*")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		filepath.Join(committed, "x_changed.md") + ": out of date",
		filepath.Join(committed, "x_new.md") + ": missing",
		filepath.Join(committed, "x_gone.md") + ": no longer generated",
	}
	if len(got) != len(want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("problem %d: got %q, want %q", i, got[i], want[i])
		}
	}
}
