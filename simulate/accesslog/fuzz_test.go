package accesslog

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"
)

// FuzzRead reads each input in every format (auto-detected, envoy-json, jsonl, envoy-text and
// csv) and, gzip-compressed, auto-detected again. No input may panic, and a log in memory is
// read to io.EOF without a read error (only a corrupt gzip stream ends in one, and it must).
// The invariant is that every non-blank line is counted exactly once, at its own line number,
// as a record or as a bad line, whatever the format makes of it:
//
//   - Lines end at '\n'. A last line without one is a line; a final '\n' starts none. Line
//     numbers count every line, blank ones too, and Reader.Line is the number of lines at the
//     end. A UTF-8 byte order mark that starts the log (after gzip) is not part of line 1.
//   - A line is blank when nothing but white space (strings.TrimSpace, after its "\r\n")
//     remains; blank lines are skipped, neither records nor bad lines. A line longer than
//     1 MiB without its line end is a bad line even if blank.
//   - With CSV, the first line that is not blank is the header row: neither a record nor a bad
//     line, so lines = records + bad lines + 1. A header row NewReader refuses ends the log
//     before any record (its error names the header row).
//   - No record spans lines: a JSON object or a quoted CSV field broken over two lines is two
//     lines, each counted on its own (a bad line, or a record if it parses alone).
//
// So for every log: non-blank lines = records + bad lines (+ 1 with a CSV header row). Read and
// ReadArena, with an arena reused every few records, must also return the same results.
//
// buffer sets the reader's buffer from 16 bytes to 4 KiB (4 KiB reads as production's 256 KiB
// does: the whole line at once, and format detection's 4 KiB), so that lines span buffer fills
// as only lines over 256 KiB do in production.
func FuzzRead(f *testing.F) {
	// The seed corpus is testdata/fuzz/FuzzRead: one entry per format, and the line endings,
	// blank lines, headers and multi-line cases the invariant spells out.
	f.Cleanup(func(size int) func() { return func() { bufferSize = size } }(bufferSize))
	var zip sync.Pool
	f.Fuzz(func(t *testing.T, input string, buffer uint16) {
		bufferSize = 16 + int(buffer)%4081
		for _, format := range []Format{FormatAuto, FormatEnvoyJSON, FormatJSONL, FormatEnvoyText, FormatCSV} {
			checkCounted(t, format, input)
		}
		// Compressed, stored rather than deflated: the gzip path is under test, not compression.
		// The writers are reused: each holds over half a megabyte of tables.
		var z bytes.Buffer
		zw, _ := zip.Get().(*gzip.Writer)
		if zw == nil {
			zw, _ = gzip.NewWriterLevel(&z, gzip.NoCompression)
		} else {
			zw.Reset(&z)
		}
		zw.Write([]byte(input))
		zw.Close()
		zip.Put(zw)
		checkCounted(t, FormatAuto, z.String())
	})
}

// checkCounted reads log in format and checks FuzzRead's invariant.
func checkCounted(t *testing.T, format Format, log string) {
	t.Helper()
	name := string(format)
	if format == FormatAuto {
		name = "auto-detected"
	}
	content, zerr := logContent(log)
	if errors.Is(zerr, errTooLarge) {
		return
	}
	opts := Options{Format: format, Headers: []string{"x-tenant-id"}}
	if format == FormatEnvoyJSON || format == FormatJSONL {
		opts.Mapping = Mapping{"x-tenant-id": "a.b"} // a dotted key: the reader enters nested objects
	}
	isCSV := format == FormatCSV || (format == FormatAuto && zerr == nil && sniff(bufio.NewReaderSize(strings.NewReader(content), bufferSize)) == FormatCSV)
	lines, want := countedLines(content, isCSV)

	r, err := NewReader("fuzz", strings.NewReader(log), opts)
	if err != nil {
		if zerr != nil || (isCSV && strings.Contains(err.Error(), "header row")) {
			return
		}
		t.Fatalf("%s: NewReader: %v", name, err)
	}
	ra, err := NewReader("fuzz", strings.NewReader(log), opts)
	if err != nil {
		t.Fatalf("%s: NewReader for ReadArena failed where Read's did not: %v", name, err)
	}
	arena := make([]byte, 0, 64) // small, so lines spill into new buffers
	var got []int64
	var rec, arec Record
	limit := len(content) + 1 // a result per byte at most, and io.EOF
	if zerr != nil {
		limit = 16<<20 + 1 // a corrupt gzip stream fails before logContent's bound
	}
	for i := 0; ; i++ {
		if i > limit {
			t.Fatalf("%s: %d results and no io.EOF from %d bytes", name, i, len(content))
		}
		err, aerr := r.Read(&rec), ra.ReadArena(&arec, &arena)
		if !sameResult(err, aerr) {
			t.Fatalf("%s: result %d: Read returned %v, ReadArena %v", name, i, err, aerr)
		}
		var le *LineError
		switch {
		case err == io.EOF:
			if zerr != nil {
				t.Fatalf("%s: a corrupt gzip stream (%v) read to io.EOF without an error", name, zerr)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("%s: counted lines %v, want each of %v once", name, got, want)
			}
			if r.Line() != lines {
				t.Fatalf("%s: Line() at the end is %d, want %d", name, r.Line(), lines)
			}
			return
		case err == nil:
			if !reflect.DeepEqual(rec, arec) {
				t.Fatalf("%s: line %d: ReadArena %+v, Read %+v", name, rec.Line, arec, rec)
			}
			if rec.File != "fuzz" || rec.TimeMs < 0 || rec.TimeMs > maxTimeMs {
				t.Fatalf("%s: line %d: file %q, time %d ms: want fuzz and a time from 1970 to 9999", name, rec.Line, rec.File, rec.TimeMs)
			}
			got = append(got, rec.Line)
		case errors.As(err, &le):
			if le.File != "fuzz" || !utf8.ValidString(le.Text) {
				t.Fatalf("%s: bad line %d: file %q, text %q: want fuzz and valid UTF-8", name, le.Line, le.File, le.Text)
			}
			got = append(got, le.Line)
		default:
			if zerr != nil {
				return // the corrupt gzip stream, reported
			}
			t.Fatalf("%s: read error from a log in memory: %v", name, err)
		}
		if i%3 == 2 {
			arena = arena[:0]
		}
	}
}

// sameResult reports whether Read's and ReadArena's errors for one line are the same.
func sameResult(a, b error) bool {
	var la, lb *LineError
	if errors.As(a, &la) && errors.As(b, &lb) {
		return la.Line == lb.Line && la.Text == lb.Text && la.Err.Error() == lb.Err.Error()
	}
	if a == nil || b == nil {
		return a == b
	}
	return a.Error() == b.Error()
}

var errTooLarge = errors.New("decompresses to more than 16 MiB")

// logContent is the text the reader reads from log: decompressed if log starts with gzip's magic
// bytes, without a leading byte order mark. The error is a corrupt gzip stream's, or
// errTooLarge for a stream FuzzRead skips rather than inflate.
func logContent(log string) (string, error) {
	if len(log) >= 2 && log[0] == 0x1f && log[1] == 0x8b {
		zr, err := gzip.NewReader(strings.NewReader(log))
		if err != nil {
			return "", err
		}
		b, err := io.ReadAll(io.LimitReader(zr, 16<<20+1))
		if err != nil {
			return "", err
		}
		if len(b) > 16<<20 {
			return "", errTooLarge
		}
		log = string(b)
	}
	return strings.TrimPrefix(log, "\xef\xbb\xbf"), nil
}

// countedLines returns the number of lines of content and the numbers of those the reader must
// count, each once, as a record or a bad line: not the blank ones, nor a CSV log's header row.
func countedLines(content string, csv bool) (lines int64, counted []int64) {
	headerRead := !csv
	for rest := content; rest != ""; {
		line, after, _ := strings.Cut(rest, "\n")
		rest = after
		lines++
		if len(strings.TrimRight(line, "\r")) <= maxLine && strings.TrimSpace(line) == "" {
			continue
		}
		if !headerRead {
			headerRead = true
			continue
		}
		counted = append(counted, lines)
	}
	return lines, counted
}
