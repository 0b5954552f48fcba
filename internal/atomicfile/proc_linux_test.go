package atomicfile

import (
	"fmt"
	"io"
	"os"
	"testing"
)

// /dev/stdout is a link to /proc/self/fd/1, which leads to a pipe or a terminal but names no
// file that a rename could replace: such a path is written as it is.
func TestWriteThroughProcLink(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got := make(chan string, 1)
	go func() { b, _ := io.ReadAll(r); got <- string(b) }()
	path := fmt.Sprintf("/proc/self/fd/%d", w.Fd())
	if err := Write(path, func(out io.Writer) error { _, err := io.WriteString(out, "through /proc"); return err }); err != nil {
		t.Fatal(err)
	}
	w.Close()
	if s := <-got; s != "through /proc" {
		t.Errorf("the pipe's reader got %q", s)
	}
}
