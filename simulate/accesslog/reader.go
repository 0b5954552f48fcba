package accesslog

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"strings"
	"unsafe"
)

// Format is an access-log format.
type Format string

// The formats. FormatAuto picks one from the first non-blank byte: '{' is JSON, '[' is
// Envoy's text format, anything else CSV.
const (
	FormatAuto      Format = ""
	FormatEnvoyJSON Format = "envoy-json"
	FormatEnvoyText Format = "envoy-text"
	FormatJSONL     Format = "jsonl"
	FormatCSV       Format = "csv"
)

// ParseFormat checks a --log-format value.
func ParseFormat(s string) (Format, error) {
	switch f := Format(s); f {
	case FormatAuto, FormatEnvoyJSON, FormatEnvoyText, FormatJSONL, FormatCSV:
		return f, nil
	}
	return "", fmt.Errorf("log format %q: want envoy-json, envoy-text, jsonl or csv", s)
}

// Options configure a Reader.
type Options struct {
	Format Format
	// Mapping remaps log keys onto record fields (see Mapping). With CSV, a mapped column the
	// header row lacks is an error of NewReader.
	Mapping Mapping
	// Headers are the request headers (lower case) to capture into Record.Headers, such as the
	// ones a policy's descriptor sources read. A header is found under its own name, with '-'
	// replaced by '_', or as mapped; unmapped, the name matches in any case (X-Tenant-Id).
	Headers []string
}

// LineError is a line that could not be parsed. Reading may continue after it.
type LineError struct {
	File string
	Line int64
	Err  error
	// Text is the start of the line, for reports.
	Text string
}

func (e *LineError) Error() string {
	return fmt.Sprintf("%s:%d: %v", e.File, e.Line, e.Err)
}

func (e *LineError) Unwrap() error { return e.Err }

// maxLine bounds one line; longer lines are bad lines, not allocations without limit.
const maxLine = 1 << 20

// bufferSize is a Reader's buffer: a line longer than it spans several fills (nextLine). It is
// a variable so that FuzzRead can make short lines do that.
var bufferSize = 256 << 10

// Reader reads Records from one access log.
type Reader struct {
	name string
	br   *bufio.Reader
	line int64
	buf  []byte // a long line spanning several buffer fills
	read func(line string, rec *Record) error
	gzip bool // the log is gzip-compressed
	// noTime is the error of a line without a timestamp, made once so such lines cost no more
	// than other bad lines.
	noTime error
	// mapped are the --field mappings, and seen[i] says a line had a value for mapped[i]'s
	// key (the parser marks it; a CSV header was checked when it was read).
	mapped []mappedKey
	seen   []bool
}

// Unseen returns the --field mappings (NAME=KEY) for whose KEY no line read so far had a
// value, in the order of their keys: a misspelt key would otherwise leave its field empty in
// every record without a word. A CSV log's mappings are checked against its header when it
// is opened, so it never has any; a text log has fixed fields, so it has all of them.
func (r *Reader) Unseen() []string {
	var out []string
	for i, mk := range r.mapped {
		if !r.seen[i] {
			out = append(out, mk.spec)
		}
	}
	return out
}

// NewReader returns a Reader of r, named name in errors. Gzip input is decompressed. A CSV log's
// header row is read here, so a header without a timestamp column or without a column
// opts.Mapping names is an error here rather than a bad line per record.
func NewReader(name string, r io.Reader, opts Options) (*Reader, error) {
	br, gzipped := bufio.NewReaderSize(r, bufferSize), false
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("%s: gzip: %w", name, err)
		}
		br, gzipped = bufio.NewReaderSize(zr, bufferSize), true
	}
	if bom, _ := br.Peek(3); bytes.Equal(bom, []byte("\xef\xbb\xbf")) {
		_, _ = br.Discard(3) // a UTF-8 byte order mark, as editors on Windows write them; Peek had it
	}
	rd := &Reader{name: name, br: br, gzip: gzipped, noTime: fmt.Errorf("no timestamp (%s)", timeKeys(opts.Mapping))}
	format := opts.Format
	if format == FormatAuto {
		format = sniff(br)
	}
	keys := keyTable(opts.Mapping, opts.Headers)
	rd.mapped = mappedKeys(opts.Mapping)
	rd.seen = make([]bool, len(rd.mapped))
	switch format {
	case FormatEnvoyJSON, FormatJSONL:
		p := &jsonParser{keys: newKeyIndex(keys), seen: rd.seen}
		rd.read = p.parse
	case FormatEnvoyText:
		if opts.Format == FormatEnvoyText && len(opts.Mapping) > 0 {
			// The text format's fields are fixed by position; a mapping would be ignored. A
			// text log detected among others leaves its mappings unseen instead (Unseen).
			return nil, fmt.Errorf("%s: --field does not apply to Envoy's default text format, whose fields are fixed", name)
		}
		rd.read = parseText
	case FormatCSV:
		c := &csvState{keys: keys}
		if err := rd.readCSVHeader(c, opts.Mapping); err != nil {
			return nil, err
		}
		for i := range rd.seen {
			rd.seen[i] = true // readCSVHeader found every mapped column
		}
		rd.read = c.parse
	default:
		return nil, fmt.Errorf("%s: log format %q unknown", name, format)
	}
	return rd, nil
}

// sniff guesses the format from the first non-blank byte.
func sniff(br *bufio.Reader) Format {
	peek, _ := br.Peek(4096)
	peek = bytes.TrimLeft(peek, " \t\r\n\ufeff")
	switch {
	case len(peek) == 0, peek[0] == '{':
		return FormatEnvoyJSON
	case peek[0] == '[':
		return FormatEnvoyText
	}
	return FormatCSV
}

// Read reads the next record into rec, reusing rec's header slice. It returns io.EOF at the end,
// a *LineError for a bad line (call Read again to continue), or another error that ends the read.
// Blank lines are skipped.
func (r *Reader) Read(rec *Record) error {
	return r.read1(rec, nil)
}

// ReadArena is Read that copies the line into *arena, a buffer the caller reuses, instead of
// allocating a string for it: the record's strings view the arena's bytes and stay valid until
// the caller reuses the arena (sets it to (*arena)[:0]), so a caller that reads a batch of
// records into one arena pays no allocation per line. When a line does not fit, ReadArena
// starts a new buffer and leaves the full one to the records that view it. A caller must clone
// any string it keeps beyond the arena's reuse.
func (r *Reader) ReadArena(rec *Record, arena *[]byte) error {
	return r.read1(rec, arena)
}

// arenaChunk is the smallest buffer ReadArena starts.
const arenaChunk = 1 << 20

func (r *Reader) read1(rec *Record, arena *[]byte) error {
	for {
		line, err := r.nextLine()
		if err != nil {
			if err == io.EOF {
				return err
			}
			return r.readError(err)
		}
		r.line++
		if len(line) > maxLine {
			return r.lineError(errors.New("line longer than 1 MiB"), line)
		}
		var s string
		if arena == nil {
			s = string(line)
		} else {
			if cap(*arena)-len(*arena) < len(line) {
				*arena = make([]byte, 0, max(arenaChunk, len(line)))
			}
			at := len(*arena)
			*arena = append(*arena, line...)
			s = unsafe.String(unsafe.SliceData((*arena)[at:]), len(line))
		}
		s = strings.TrimRight(s, "\r\n")
		if strings.TrimSpace(s) == "" {
			continue
		}
		rec.reset()
		if err := r.read(s, rec); err != nil {
			return r.lineError(err, line)
		}
		if rec.TimeMs == noTimestamp {
			return r.lineError(r.noTime, line)
		}
		rec.File, rec.Line = r.name, r.line
		return nil
	}
}

// readCSVHeader reads the header row, the first non-blank line, into c. An empty log has none
// and reads as empty.
func (r *Reader) readCSVHeader(c *csvState, m Mapping) error {
	for {
		line, err := r.nextLine()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return r.readError(err)
		}
		r.line++
		if len(line) > maxLine {
			return fmt.Errorf("%s:%d: csv header row longer than 1 MiB", r.name, r.line)
		}
		s := strings.TrimRight(string(line), "\r\n")
		if strings.TrimSpace(s) == "" {
			continue
		}
		timeColumn, err := c.header(s, m)
		if err != nil {
			return fmt.Errorf("%s:%d: %w", r.name, r.line, err)
		}
		r.noTime = fmt.Errorf("no timestamp (column %s)", timeColumn)
		return nil
	}
}

// Line is the number of lines read so far.
func (r *Reader) Line() int64 { return r.line }

func (r *Reader) lineError(err error, line []byte) *LineError {
	// Cut to 200 bytes, which may split a character: reports must stay valid UTF-8.
	text := strings.ToValidUTF8(strings.TrimRight(string(line[:min(len(line), 200)]), "\r\n"), "\uFFFD")
	return &LineError{File: r.name, Line: r.line, Err: err, Text: text}
}

// readError says where reading the log failed; a gzip stream that ends early is called a
// truncated file.
func (r *Reader) readError(err error) error {
	if r.gzip && errors.Is(err, io.ErrUnexpectedEOF) {
		err = fmt.Errorf("%w (a truncated gzip file?)", err)
	}
	return fmt.Errorf("%s: after line %d: %w", r.name, r.line, err)
}

// nextLine returns the next line including its newline; the slice is valid until the next call.
func (r *Reader) nextLine() ([]byte, error) {
	line, err := r.br.ReadSlice('\n')
	if err == nil {
		return line, nil
	}
	if err == bufio.ErrBufferFull {
		r.buf = append(r.buf[:0], line...)
		for {
			line, err = r.br.ReadSlice('\n')
			if len(r.buf) <= maxLine {
				r.buf = append(r.buf, line...)
			}
			if err != bufio.ErrBufferFull {
				break
			}
		}
		if err != nil && err != io.EOF {
			return nil, err
		}
		return r.buf, nil
	}
	if err == io.EOF {
		if len(line) > 0 {
			return line, nil
		}
		return nil, io.EOF
	}
	return nil, err // read1 says where
}
