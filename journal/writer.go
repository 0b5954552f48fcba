package journal

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"unicode/utf8"
)

// Policy says what Write does when the journal's buffer is full because the disk is slower
// than the decisions.
type Policy int

const (
	// Drop discards the record and counts it (Dropped). The request path never waits; a replay
	// of a journal with drops is not exact, and the header of the next run shows nothing of it,
	// so the enforcer exports the count as a metric. It is the default.
	Drop Policy = iota
	// Block makes Write wait for room. The journal is complete, and a slow disk slows decisions.
	Block
)

// Options configure a Writer. The zero value is usable.
type Options struct {
	// Buffer is the number of records the channel holds; 0 means 65536.
	Buffer int
	// Policy is what Write does when the buffer is full.
	Policy Policy
}

// Writer writes a journal from a goroutine of its own, so that callers on a request path only
// copy a Record into a buffered channel. Write is safe for concurrent use; a nil *Writer
// discards everything.
type Writer struct {
	ch      chan Record
	policy  Policy
	dropped atomic.Uint64
	closed  atomic.Bool
	mu      sync.RWMutex // guards sends against Close
	done    chan struct{}
	// abandon is closed by Abandon: a Write waiting for room drops its record instead.
	abandon     chan struct{}
	abandonOnce sync.Once
	err         error // the first write error, read after done
}

// NewWriter writes h to w and starts the writer goroutine. Close stops it.
func NewWriter(w io.Writer, h Header, opts Options) (*Writer, error) {
	if opts.Buffer <= 0 {
		opts.Buffer = 1 << 16
	}
	h.Journal, h.Version = "rlctl", Version
	line, err := json.Marshal(h)
	if err != nil {
		return nil, err
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	if _, err := bw.Write(append(line, '\n')); err != nil {
		return nil, err
	}
	jw := &Writer{ch: make(chan Record, opts.Buffer), policy: opts.Policy, done: make(chan struct{}), abandon: make(chan struct{})}
	go jw.run(bw)
	return jw, nil
}

// Write queues r. Under the Drop policy it never blocks. Writes after Close are dropped.
func (w *Writer) Write(r Record) {
	if w == nil {
		return
	}
	w.mu.RLock()
	defer w.mu.RUnlock()
	if w.closed.Load() {
		w.dropped.Add(1)
		return
	}
	if w.policy == Block {
		select {
		case w.ch <- r:
		case <-w.abandon:
			w.dropped.Add(1)
		}
		return
	}
	select {
	case w.ch <- r:
	default:
		w.dropped.Add(1)
	}
}

// Abandon makes every Write from now on, and every one waiting for room under the Block policy,
// drop its record (counted in Dropped) instead of waiting: a shutdown that cannot wait for a
// disk that hangs must not wait for the requests that wait for it. Records already queued are
// still written, if the disk takes them.
func (w *Writer) Abandon() {
	if w == nil {
		return
	}
	w.abandonOnce.Do(func() { close(w.abandon) })
}

// Dropped is the number of records discarded so far.
func (w *Writer) Dropped() uint64 {
	if w == nil {
		return 0
	}
	return w.dropped.Load()
}

// Close writes every queued record, flushes, and returns the first write error. It does not
// close the underlying io.Writer.
func (w *Writer) Close() error { return w.CloseContext(context.Background()) }

// CloseContext is Close that gives up once ctx is done, returning an error that wraps ctx's: a
// journal on a disk that hangs must not hold a shutdown past its deadline. The records still
// queued are then lost.
func (w *Writer) CloseContext(ctx context.Context) error {
	if w == nil {
		return nil
	}
	// Under the Block policy, writers waiting for room hold the read lock while the disk
	// hangs: the lock is taken on a goroutine of its own, so that ctx still bounds the wait.
	go func() {
		w.mu.Lock()
		if !w.closed.Swap(true) {
			close(w.ch)
		}
		w.mu.Unlock()
	}()
	select {
	case <-w.done:
		return w.err
	case <-ctx.Done():
		return fmt.Errorf("journal: records still queued when giving up: %w", ctx.Err())
	}
}

// run writes the queued records. A record that cannot be written, or that a failed flush loses
// from the buffer, counts as dropped (Dropped): once the disk is full, the journal loses every
// record after, and says how many.
func (w *Writer) run(bw *bufio.Writer) {
	defer close(w.done)
	buf := make([]byte, 0, 512)
	var unflushed uint64 // records in bw since its last flush
	fail := func(err error) {
		if w.err == nil {
			w.err = err
		}
	}
	for r := range w.ch {
		buf = AppendRecord(buf[:0], &r)
		buf = append(buf, '\n')
		if _, err := bw.Write(buf); err != nil {
			fail(err)
			w.dropped.Add(1 + unflushed) // a bufio.Writer keeps nothing after an error
			unflushed = 0
			continue
		}
		unflushed++
		// Flush when the queue is empty: batches under load, prompt when quiet.
		if len(w.ch) == 0 {
			if err := bw.Flush(); err != nil {
				fail(err)
				w.dropped.Add(unflushed)
			}
			unflushed = 0
		}
	}
	if err := bw.Flush(); err != nil {
		fail(err)
		w.dropped.Add(unflushed)
	}
}

// ErrKind reports a record whose Kind is not one of the known kinds.
var ErrKind = errors.New("unknown record kind")

// AppendRecord appends r's line (without the newline) to dst. Fields that are zero are omitted,
// matching the JSON tags of Record.
func AppendRecord(dst []byte, r *Record) []byte {
	dst = append(dst, `{"k":"`...)
	dst = append(dst, byte(r.Kind))
	dst = append(dst, `","t":`...)
	dst = strconv.AppendInt(dst, r.TimeMs, 10)
	if r.Seq != 0 {
		dst = append(dst, `,"seq":`...)
		dst = strconv.AppendUint(dst, r.Seq, 10)
	}
	dst = appendInt(dst, "i", int64(r.Index))
	dst = appendInt(dst, "gen", int64(r.Gen))
	dst = appendStr(dst, "dom", r.Domain)
	dst = appendStr(dst, "rule", r.Rule)
	dst = appendStr(dst, "stage", r.Stage)
	dst = appendInt(dst, "cost", r.Cost)
	dst = appendStr(dst, "eng", r.Engine)
	dst = appendStr(dst, "code", r.Code)
	dst = appendStr(dst, "via", r.Via)
	dst = appendInt(dst, "reset", r.ResetMs)
	dst = appendInt(dst, "rem", r.Remaining)
	dst = appendInt(dst, "ovr_req", r.OverrideRequests)
	dst = appendInt(dst, "ovr_ms", r.OverrideMs)
	dst = appendStr(dst, "key", r.Key)
	dst = appendInt(dst, "lt", r.LocalMs)
	if r.Async {
		dst = append(dst, `,"async":true`...)
	}
	dst = appendStr(dst, "op", r.Op)
	dst = appendInt(dst, "want", r.Want)
	dst = appendInt(dst, "min", r.Min)
	dst = appendInt(dst, "got", r.Got)
	dst = appendInt(dst, "retry", r.RetryMs)
	dst = appendInt(dst, "us", r.LatencyUs)
	dst = appendStr(dst, "err", r.Err)
	dst = appendStr(dst, "ver", r.ConfigVersion)
	dst = appendInt(dst, "rules", int64(r.Rules))
	dst = appendInt(dst, "stripe", int64(r.Stripe))
	if r.Dropped != 0 {
		dst = append(dst, `,"dropped":`...)
		dst = strconv.AppendUint(dst, r.Dropped, 10)
	}
	return append(dst, '}')
}

func appendInt(dst []byte, name string, v int64) []byte {
	if v == 0 {
		return dst
	}
	dst = append(dst, ',', '"')
	dst = append(dst, name...)
	dst = append(dst, '"', ':')
	return strconv.AppendInt(dst, v, 10)
}

func appendStr(dst []byte, name, v string) []byte {
	if v == "" {
		return dst
	}
	dst = append(dst, ',', '"')
	dst = append(dst, name...)
	dst = append(dst, '"', ':')
	return appendJSONString(dst, v)
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string; invalid UTF-8 becomes U+FFFD, as encoding/json
// does.
func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				dst = append(dst, '\\', c)
			case c < 0x20:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			default:
				dst = append(dst, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, `\ufffd`...)
		} else {
			dst = append(dst, s[i:i+size]...)
		}
		i += size
	}
	return append(dst, '"')
}
