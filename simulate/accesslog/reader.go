package accesslog

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/klauspost/compress/gzip"
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
	return "", fmt.Errorf("--log-format %q: want envoy-json, envoy-text, jsonl or csv", s)
}

// ErrNoTimestamp is the error of a line without a timestamp: "no timestamp (KEYS)", with the
// keys or the column it was looked for under.
var ErrNoTimestamp = errors.New("no timestamp")

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
	// Fields are the well-known fields (FieldNames) the caller reads, or nil for all of them.
	// In JSON and CSV logs the others are left empty: their default keys are skipped as
	// unknown keys are (a value is still checked as JSON, but not stored), which spares a
	// parser the values a replay never reads, a fifth of a log line's. Their keys stay theirs,
	// so a captured header does not take them, and a field with a mapped key (Mapping) is read
	// whatever Fields says. Envoy's text format has its fields by position and fills them all.
	Fields []string
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

// Reader reads Records from one access log. It reads on one goroutine; the lines it reads
// raw (ReadRaw) may be parsed on others (NewParser).
type Reader struct {
	name   string
	format Format // as given, or as detected
	br     *bufio.Reader
	line   int64 // lines read
	// records are the lines ReadRaw returned: not blank, not a CSV header (Records).
	records int64
	buf     []byte // a long line spanning several buffer fills
	// ahead decompresses a gzip log on a goroutine of its own; nil if the log is not gzip.
	ahead  *readAhead
	closed atomic.Bool
	// noTime is the error of a line without a timestamp, made once so such lines cost no more
	// than other bad lines.
	noTime error
	// newParse returns the parse function of a new Parser, with state of its own, and the
	// seen flags it marks (nil when the format marks none).
	newParse func() (parse func(line string, rec *Record) error, seen []bool)
	own      *Parser // Read's and ReadArena's
	// mapped are the --field mappings; a parser's seen[i] says a line it parsed had a value
	// for mapped[i]'s key. A CSV header was checked when it was read: seenAll.
	mapped  []mappedKey
	seenAll bool
	mu      sync.Mutex // guards parsers
	parsers []*Parser
}

// Unseen returns the --field mappings (NAME=KEY) for whose KEY no line parsed so far, by any
// of the reader's parsers, had a value, in the order of their keys: a misspelt key would
// otherwise leave its field empty in every record without a word. Call it once the parsers
// are done: it reads what they write. A CSV log's mappings are checked against its header when
// it is opened, so it never has any; a text log has fixed fields, so it has all of them.
func (r *Reader) Unseen() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for i, mk := range r.mapped {
		seen := r.seenAll
		for _, p := range r.parsers {
			seen = seen || (p.seen != nil && p.seen[i])
		}
		if !seen {
			out = append(out, mk.spec)
		}
	}
	return out
}

// NewReader returns a Reader of r, named name in errors. Gzip input is decompressed, ahead of
// the reads, on a goroutine that Close stops. A CSV log's
// header row is read here, so a header without a timestamp column or without a column
// opts.Mapping names is an error here rather than a bad line per record.
func NewReader(name string, r io.Reader, opts Options) (_ *Reader, err error) {
	br := bufio.NewReaderSize(r, bufferSize)
	var ahead *readAhead
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("%s: gzip: %w", name, err)
		}
		ahead = startReadAhead(zr)
		defer func() {
			if err != nil {
				ahead.close()
			}
		}()
		br = bufio.NewReaderSize(ahead, bufferSize)
	}
	if bom, _ := br.Peek(3); bytes.Equal(bom, []byte("\xef\xbb\xbf")) {
		_, _ = br.Discard(3) // a UTF-8 byte order mark, as editors on Windows write them; Peek had it
	}
	rd := &Reader{name: name, br: br, ahead: ahead, noTime: fmt.Errorf("%w (%s)", ErrNoTimestamp, timeKeys(opts.Mapping))}
	format := opts.Format
	if format == FormatAuto {
		format = sniff(br)
	}
	rd.format = format
	read, err := readFields(opts.Fields)
	if err != nil {
		return nil, err
	}
	keys := keyTable(opts.Mapping, opts.Headers, read)
	rd.mapped = mappedKeys(opts.Mapping)
	switch format {
	case FormatEnvoyJSON, FormatJSONL:
		ix := newKeyIndex(keys)
		rd.newParse = func() (func(string, *Record) error, []bool) {
			p := newJSONParser(ix, len(rd.mapped))
			return p.parse, p.seen
		}
	case FormatEnvoyText:
		if opts.Format == FormatEnvoyText && len(opts.Mapping) > 0 {
			// The text format's fields are fixed by position; a mapping would be ignored. A
			// text log detected among others leaves its mappings unseen instead (Unseen), and
			// CheckMapping refuses a mapping when every log is one.
			return nil, fixedFieldsError(name)
		}
		rd.newParse = func() (func(string, *Record) error, []bool) { return parseText, nil }
	case FormatCSV:
		c := &csvState{keys: keys}
		if err := rd.readCSVHeader(c, opts.Mapping); err != nil {
			if opts.Format == FormatAuto {
				// A log in none of the formats (or not a log) is read as CSV: say so.
				err = fmt.Errorf("%w; read as CSV, as its first byte is neither '{' nor '[' (give --log-format if it is not CSV)", err)
			}
			return nil, err
		}
		rd.seenAll = true // readCSVHeader found every mapped column
		rd.newParse = func() (func(string, *Record) error, []bool) {
			return (&csvState{columns: c.columns, hasCol: c.hasCol}).parse, nil
		}
	default:
		return nil, fmt.Errorf("%s: log format %q unknown", name, format)
	}
	rd.own = rd.NewParser()
	if ahead != nil {
		runtime.AddCleanup(rd, (*readAhead).stop, ahead)
	}
	return rd, nil
}

// fixedFieldsError is the error of a --field mapping for a log in Envoy's text format.
func fixedFieldsError(name string) error {
	return fmt.Errorf("%s: --field does not apply to Envoy's default text format, whose fields are fixed", name)
}

// CheckMapping returns the error NewReader returns for a mapping with FormatEnvoyText given
// when the readers' formats were detected instead and every one is Envoy's text format, whose
// fields are fixed: the mapping would apply to none of the logs. A text log among logs of
// other formats is no error: the mapping is for those (the text log leaves it unseen).
func CheckMapping(readers []*Reader, m Mapping) error {
	if len(m) == 0 || len(readers) == 0 {
		return nil
	}
	for _, r := range readers {
		if r.format != FormatEnvoyText {
			return nil
		}
	}
	return fixedFieldsError(readers[0].name)
}

// Close stops a gzip log's read-ahead, the goroutine that decompresses the log ahead of
// ReadRaw, and waits for it to end: it may have one read of the io.Reader given to NewReader to
// finish, and does not read it again, so that the caller may close it once Close returns
// (Close does not). A read after Close, or one that Close ends, returns an error. Close may be
// called more than once, from any goroutine, and on a Reader of any log (only gzip ones have a
// read-ahead). A Reader dropped without Close has it stopped when it is garbage-collected.
func (r *Reader) Close() error {
	r.closed.Store(true)
	if r.ahead != nil {
		r.ahead.close()
	}
	return nil
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
	return r.readParse(rec, nil)
}

// ReadArena is Read that copies the line into *arena, a buffer the caller reuses, instead of
// allocating a string for it: the record's strings view the arena's bytes and stay valid until
// the caller reuses the arena (sets it to (*arena)[:0]), so a caller that reads a batch of
// records into one arena pays no allocation per line. When a line does not fit, ReadArena
// starts a new buffer and leaves the full one to the records that view it. A caller must clone
// any string it keeps beyond the arena's reuse.
func (r *Reader) ReadArena(rec *Record, arena *[]byte) error {
	return r.readParse(rec, arena)
}

func (r *Reader) readParse(rec *Record, arena *[]byte) error {
	line, num, err := r.readRaw(arena)
	if err != nil {
		return err
	}
	return r.own.Parse(line, num, rec)
}

// ReadRaw reads the next non-blank line into *arena, as ReadArena does (the returned string
// views the arena's bytes, and a new buffer is started when the line does not fit), with the
// '\r' and '\n' bytes that end it removed, and returns it with its 1-based line number, for a
// Parser to parse, on this goroutine or another. It returns io.EOF at the end, a *LineError
// for a line longer than 1 MiB (call ReadRaw again to continue), or another error that ends
// the read.
func (r *Reader) ReadRaw(arena *[]byte) (line string, num int64, err error) {
	return r.readRaw(arena)
}

// arenaChunk is the smallest buffer ReadRaw starts.
const arenaChunk = 1 << 20

var errLongLine = errors.New("line longer than 1 MiB")

// readRaw is ReadRaw, which allocates the line's string when arena is nil.
func (r *Reader) readRaw(arena *[]byte) (string, int64, error) {
	if r.closed.Load() {
		return "", 0, r.readError(errClosed)
	}
	for {
		line, err := r.nextLine()
		if err != nil {
			if err == io.EOF {
				return "", 0, err
			}
			return "", 0, r.readError(err)
		}
		r.line++
		line = trimEOL(line) // the limit is on the line, not its end
		if len(line) > maxLine {
			r.records++
			return "", r.line, lineError(r.name, r.line, errLongLine, unsafe.String(unsafe.SliceData(line), len(line)))
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		r.records++
		if arena == nil {
			return string(line), r.line, nil
		}
		if cap(*arena)-len(*arena) < len(line) {
			*arena = make([]byte, 0, max(arenaChunk, len(line)))
		}
		at := len(*arena)
		*arena = append(*arena, line...)
		return unsafe.String(unsafe.SliceData((*arena)[at:]), len(line)), r.line, nil
	}
}

// trimEOL is bytes.TrimRight(line, "\r\n"), which builds a set of its cutset's bytes on every
// call: a line ends in one byte of it, or two.
func trimEOL(line []byte) []byte {
	for len(line) > 0 && (line[len(line)-1] == '\n' || line[len(line)-1] == '\r') {
		line = line[:len(line)-1]
	}
	return line
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
		if len(trimEOL(line)) > maxLine {
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
		r.noTime = fmt.Errorf("%w (column %s)", ErrNoTimestamp, timeColumn)
		return nil
	}
}

// Line is the number of lines read so far.
func (r *Reader) Line() int64 { return r.line }

// Records is the number of lines ReadRaw returned so far, parsed or too long: the lines read
// that are neither blank nor a CSV log's header row.
func (r *Reader) Records() int64 { return r.records }

// lineError is the error of line number num of the log named file; line is the line with or
// without its newline.
func lineError(file string, num int64, err error, line string) *LineError {
	// Cut to 200 bytes, which may split a character: reports must stay valid UTF-8.
	// The clone is the report's own: line may view a buffer the caller reuses.
	text := strings.ToValidUTF8(strings.TrimRight(strings.Clone(line[:min(len(line), 200)]), "\r\n"), "\uFFFD")
	return &LineError{File: file, Line: num, Err: err, Text: text}
}

// readError says where reading the log failed; a gzip stream that ends early is called a
// truncated file.
func (r *Reader) readError(err error) error {
	if r.ahead != nil && errors.Is(err, io.ErrUnexpectedEOF) {
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
	return nil, err // readRaw says where
}
