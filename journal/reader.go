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
	// pending says the scanner holds a line Next has not returned (it looked past a bad one),
	// and skipped the blank lines it passed on the way.
	pending bool
	skipped int
	cut     int   // the line number of a cut-off last line (Cut)
	err     error // a read error, returned from then on
}

// Cut is the line number of the journal's last line when it was cut off, as an enforcer that
// crashed mid-write leaves it, and 0 otherwise. Next returns io.EOF in its place.
func (r *Reader) Cut() int { return r.cut }

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
// names its line number; reading may continue past it. A malformed last line is the record an
// enforcer was writing when it stopped: Next returns io.EOF for it, and Cut says so.
func (r *Reader) Next() (Record, error) {
	if r.err != nil {
		return Record{}, r.err
	}
	for r.pending || r.sc.Scan() {
		if r.pending {
			r.pending, r.line, r.skipped = false, r.line+r.skipped, 0
		}
		r.line++
		b := r.sc.Bytes()
		if len(b) == 0 {
			continue
		}
		var w wireRecord
		if err := json.Unmarshal(b, &w); err != nil {
			more, skipped := r.scanText()
			switch {
			case !more && r.sc.Err() == nil:
				r.cut = r.line
				return Record{}, io.EOF
			case more:
				r.pending, r.skipped = true, skipped
			}
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
		r.err = fmt.Errorf("journal: line %d: %w", r.line+1+r.skipped, err)
		return Record{}, r.err
	}
	return Record{}, io.EOF
}

// scanText scans past blank lines to the next line with text, if there is one, and says how
// many blank lines it passed.
func (r *Reader) scanText() (more bool, skipped int) {
	for r.sc.Scan() {
		if len(r.sc.Bytes()) > 0 {
			return true, skipped
		}
		skipped++
	}
	return false, skipped
}
