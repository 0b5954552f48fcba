package simulate

import (
	"errors"
	"io"

	"github.com/rlctl/rlctl/simulate/accesslog"
)

// logSource reads one log's records for mergedSource.
type logSource struct {
	rd    *accesslog.Reader
	onBad func(*accesslog.LineError) error
}

// next reads the log's next record into rec, whose strings view *arena
// (accesslog.Reader.ReadArena), or returns io.EOF at the end. Bad lines go to onBad and are
// skipped.
func (s *logSource) next(rec *accesslog.Record, arena *[]byte) error {
	for {
		err := s.rd.ReadArena(rec, arena)
		if err == nil || err == io.EOF {
			return err
		}
		// Declared on the bad-line path only: errors.As makes le escape to the heap, and a
		// good record should not pay an allocation for it.
		var le *accesslog.LineError
		if !errors.As(err, &le) {
			return err
		}
		if err := s.onBad(le); err != nil {
			return err
		}
	}
}

// mergedSource reads several logs as one, in time order, as a fleet's gateways each write
// their own log of the same period: each log is read one record ahead, and the earliest of
// those heads goes next (the earlier log's on a tie). A log's own records keep their order, so
// one out of order within its log is replayed late, as it would be alone (report.Report.Reordered).
type mergedSource struct {
	heads []*mergeHead // the logs not yet at their end, in input order
}

type mergeHead struct {
	src   logSource
	rec   accesslog.Record
	arena []byte // rec's; reused once rec is copied out
}

// mergeHeadArena is the buffer each head starts with, one per log: it holds long lines, where
// a head starting empty would have ReadArena allocate a megabyte for its first line.
const mergeHeadArena = 64 << 10

func newMergedSource(readers []*accesslog.Reader, onBad func(*accesslog.LineError) error) (*mergedSource, error) {
	m := &mergedSource{}
	for _, rd := range readers {
		h := &mergeHead{src: logSource{rd: rd, onBad: onBad}, arena: make([]byte, 0, mergeHeadArena)}
		switch err := h.src.next(&h.rec, &h.arena); err {
		case nil:
			m.heads = append(m.heads, h)
		case io.EOF:
		default:
			return nil, err
		}
	}
	return m, nil
}

// next reads the earliest head's record into rec, as logSource.next does.
func (m *mergedSource) next(rec *accesslog.Record, arena *[]byte) error {
	if len(m.heads) == 0 {
		return io.EOF
	}
	first := 0
	for i, h := range m.heads[1:] {
		if h.rec.TimeMs < m.heads[first].rec.TimeMs {
			first = i + 1
		}
	}
	h := m.heads[first]
	h.rec.CopyTo(rec, arena)
	h.arena = h.arena[:0]
	switch err := h.src.next(&h.rec, &h.arena); err {
	case nil:
	case io.EOF:
		m.heads = append(m.heads[:first], m.heads[first+1:]...)
	default:
		return err
	}
	return nil
}
