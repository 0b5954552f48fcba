// Package atomicfile owns rlctl's one way of writing an output file (the --out of every command):
// atomically, so a reader sees the old file or the whole new one and never a part. What is not a
// regular file (a device such as /dev/null, a named pipe) is written to as it is, and a symbolic
// link stays one: its target is what is replaced.
package atomicfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// An Error is a failure to write the file at Path. Its message names Path, never the temporary
// file the content went through: "out/x.json: is a directory".
type Error struct {
	Path string
	Err  error
}

func (e *Error) Error() string { return e.Path + ": " + e.Err.Error() }

func (e *Error) Unwrap() error { return e.Err }

// Write calls write with a temporary file in the directory of the file path names and, when it
// returns nil, renames the file over it, keeping the mode of a file it replaces (0644 for a new
// one). path may be a symbolic link, whose target is replaced. A path that names a device, a
// named pipe or a socket is opened and written as it is, as it cannot be replaced; one that
// names a directory fails before anything is written. Every error is an *Error.
func Write(path string, write func(io.Writer) error) error {
	st, err := stage(path, write)
	if err != nil {
		return err
	}
	return st.commit()
}

// WriteFiles writes each file of paths with its content as Write does, all of them or none as
// far as the filesystem allows: every content is written to its temporary file first, and the
// files are renamed over their paths only once all are written. A failure before then (a full
// disk, say) leaves every file as it was. Every error is an *Error.
func WriteFiles(paths []string, contents [][]byte) error {
	var pending []*staged
	defer func() {
		for _, st := range pending {
			st.abandon() // those not committed
		}
	}()
	for i, p := range paths {
		b := contents[i]
		st, err := stage(p, func(w io.Writer) error { _, err := w.Write(b); return err })
		if err != nil {
			return err
		}
		pending = append(pending, st)
	}
	for len(pending) > 0 {
		if err := pending[0].commit(); err != nil {
			return err
		}
		pending = pending[1:]
	}
	return nil
}

// staged is a file's new content written to a temporary file beside it, to be renamed over it
// (commit) or removed (abandon). One whose path is no regular file was written in place: it has
// no temporary file.
type staged struct {
	path, target string
	tmp          *os.File
	done         bool
}

// stage writes what write writes to a temporary file for path (see Write), or to path itself
// when it is no regular file.
func stage(path string, write func(io.Writer) error) (*staged, error) {
	fail := func(err error) error {
		return &Error{Path: path, Err: unwrapPath(err)} // a path error's path is the temporary file's
	}
	// What path opens, its links followed as the kernel follows them (/dev/stdout leads to a
	// pipe or a terminal through /proc's links, which name no file to replace).
	mode := fs.FileMode(0o644)
	switch fi, err := os.Stat(path); {
	case err != nil: // a new file
	case fi.IsDir():
		return nil, &Error{Path: path, Err: errors.New("is a directory")}
	case !fi.Mode().IsRegular():
		return &staged{path: path, done: true}, writeInPlace(path, write, fail)
	default:
		mode = fi.Mode().Perm()
	}
	target := resolve(path)
	dir := filepath.Dir(target)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(target)+".tmp*")
	if err != nil {
		return nil, fail(fmt.Errorf("cannot create a file in %s: %w", dir, unwrapPath(err)))
	}
	st := &staged{path: path, target: target, tmp: tmp}
	err = write(tmp)
	if err == nil {
		err = tmp.Chmod(mode)
	}
	if err == nil {
		err = tmp.Close()
	}
	if err != nil {
		st.abandon()
		return nil, fail(err)
	}
	return st, nil
}

// commit renames the temporary file over the file.
func (st *staged) commit() error {
	if st.done {
		return nil
	}
	st.done = true
	if err := os.Rename(st.tmp.Name(), st.target); err != nil {
		os.Remove(st.tmp.Name())
		return &Error{Path: st.path, Err: unwrapPath(err)}
	}
	return nil
}

// abandon removes the temporary file, unless it was committed.
func (st *staged) abandon() {
	if st.done {
		return
	}
	st.done = true
	st.tmp.Close()
	os.Remove(st.tmp.Name())
}

// resolve returns the file that path names once its symbolic links are followed, which need
// not exist yet (a link to a file to be made); path itself when it is no link.
func resolve(path string) string {
	if real, err := filepath.EvalSymlinks(path); err == nil {
		return real
	}
	// A link whose target does not exist yet: follow it one link at a time.
	for range 40 { // as the kernel gives up on a loop
		to, err := os.Readlink(path)
		if err != nil {
			return path
		}
		if !filepath.IsAbs(to) {
			to = filepath.Join(filepath.Dir(path), to)
		}
		path = to
	}
	return path
}

// writeInPlace writes to target, which is no regular file (a device, a named pipe), as it is.
func writeInPlace(target string, write func(io.Writer) error, fail func(error) error) error {
	f, err := os.OpenFile(target, os.O_WRONLY, 0)
	if err != nil {
		return fail(err)
	}
	if err := write(f); err != nil {
		f.Close()
		return fail(err)
	}
	if err := f.Close(); err != nil {
		return fail(err)
	}
	return nil
}

func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
