package journal

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
)

// Reader reads a journal written by Writer. It is not safe for concurrent use.
type Reader struct {
	sc     *bufio.Scanner
	line   int
	header Header
}

// NewReader reads and checks the header of the journal in r.
func NewReader(r io.Reader) (*Reader, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	jr := &Reader{sc: sc}
	if !sc.Scan() {
		if err := sc.Err(); err != nil {
			return nil, fmt.Errorf("journal: line 1: %w", err)
		}
		return nil, fmt.Errorf("journal: empty input, want a header line")
	}
	jr.line = 1
	if err := json.Unmarshal(sc.Bytes(), &jr.header); err != nil {
		return nil, fmt.Errorf("journal: line 1: bad header: %w", err)
	}
	if jr.header.Journal != "rlctl" {
		return nil, fmt.Errorf("journal: line 1: not an rlctl journal")
	}
	if jr.header.Version < 1 || jr.header.Version > Version {
		return nil, fmt.Errorf("journal: line 1: version %d, this reader reads versions 1 to %d", jr.header.Version, Version)
	}
	return jr, nil
}

// Header returns the journal's header.
func (r *Reader) Header() Header { return r.header }

// Line is the line number of the record Next returned last.
func (r *Reader) Line() int { return r.line }

// wireRecord is Record with its kind as a string, for decoding.
type wireRecord struct {
	K string `json:"k"`
	Record
}

// Next returns the next record, or io.EOF after the last. A malformed line is an error that
// names its line number; reading may continue past it.
func (r *Reader) Next() (Record, error) {
	for r.sc.Scan() {
		r.line++
		b := r.sc.Bytes()
		if len(b) == 0 {
			continue
		}
		var w wireRecord
		if err := json.Unmarshal(b, &w); err != nil {
			return Record{}, fmt.Errorf("journal: line %d: %w", r.line, err)
		}
		if len(w.K) != 1 {
			return Record{}, fmt.Errorf("journal: line %d: kind %q: %w", r.line, w.K, ErrKind)
		}
		switch k := Kind(w.K[0]); k {
		case KindDecision, KindStore, KindConfig, KindSweep, KindEnd:
			w.Record.Kind = k
		default:
			return Record{}, fmt.Errorf("journal: line %d: kind %q: %w", r.line, w.K, ErrKind)
		}
		return w.Record, nil
	}
	if err := r.sc.Err(); err != nil {
		return Record{}, fmt.Errorf("journal: line %d: %w", r.line+1, err)
	}
	return Record{}, io.EOF
}
