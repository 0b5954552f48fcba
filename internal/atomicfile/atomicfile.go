// Package atomicfile owns rlctl's one way of writing an output file (the --out of every command):
// atomically, so a reader sees the old file or the whole new one and never a part.
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

// Write calls write with a temporary file in path's directory and, when it returns nil, renames
// the file over path with mode 0644. A path that names a directory fails before anything is
// written. Every error is an *Error.
func Write(path string, write func(io.Writer) error) (err error) {
	fail := func(err error) error {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err // its path is the temporary file's
		}
		return &Error{Path: path, Err: err}
	}
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return &Error{Path: path, Err: errors.New("is a directory")}
	}
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fail(fmt.Errorf("cannot create a file in %s: %w", dir, unwrapPath(err)))
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err := write(tmp); err != nil {
		return fail(err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		return fail(err)
	}
	if err := tmp.Close(); err != nil {
		return fail(err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
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
