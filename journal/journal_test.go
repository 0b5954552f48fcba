package journal

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestRoundTrip(t *testing.T) {
	recs := []Record{
		{Kind: KindConfig, TimeMs: 1000, ConfigVersion: "sha256:abc", Rules: 3},
		{Kind: KindStore, TimeMs: 1001, Op: OpTake, Key: "edge|tenant=bigcorp", Want: 500, Min: 1, Got: 500, Remaining: 9500, LatencyUs: 143},
		{Kind: KindDecision, TimeMs: 1002, Seq: 1, Domain: "edge", Rule: "bigcorp", Key: "edge|tenant=bigcorp", Cost: 1, Engine: CodeOK, Code: CodeOK, Via: ViaLease, Remaining: 499, ResetMs: 2},
		{Kind: KindDecision, TimeMs: 1003, Seq: 2, Index: 1, Domain: "edge", Rule: "r", Stage: "shadow", Key: "k\"\\\n\xff é", Cost: 3, Engine: CodeOver, Code: CodeOK, Via: ViaShortCircuit, ResetMs: 900},
		{Kind: KindStore, TimeMs: 1004, Op: OpTake, Key: "k", Want: 5, Min: 1, Err: "store: timeout"},
		{Kind: KindStore, TimeMs: 1005, LocalMs: 1004, Async: true, Op: OpTake, Key: "k", Want: 5, Min: 1, Got: 5, ResetMs: 9},
		{Kind: KindDecision, TimeMs: 1006, Seq: 3, Gen: 2, Domain: "edge", Rule: "r", Key: "k", Cost: 1, Engine: CodeOK, Code: CodeOK,
			Via: ViaStore, OverrideRequests: 50, OverrideMs: 1000},
		{Kind: KindSweep, TimeMs: 2000, Stripe: 17},
		{Kind: KindEnd, TimeMs: 3000, Dropped: 4},
	}
	r, err := NewReader(journalOf(t, Header{Instance: "pod-a", StartMs: 999}, recs))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := r.Header(), (Header{Journal: "rlctl", Version: Version, Instance: "pod-a", StartMs: 999}); got != want {
		t.Errorf("header: got %+v, want %+v", got, want)
	}
	for i, want := range recs {
		if want.Key == "k\"\\\n\xff é" {
			want.Key = "k\"\\\n\ufffd é" // invalid UTF-8 is replaced, as encoding/json does
		}
		got, err := r.Next()
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("record %d: got %+v, want %+v", i, got, want)
		}
	}
	if _, err := r.Next(); err != io.EOF {
		t.Errorf("after last: got %v, want io.EOF", err)
	}
}

// TestAppendRecordIsJSON checks the hand-written encoder against encoding/json.
func TestAppendRecordIsJSON(t *testing.T) {
	r := Record{Kind: KindDecision, TimeMs: 5, Domain: "d\u2028\t", Cost: -1, Rule: "<x>&"}
	line := AppendRecord(nil, &r)
	var m map[string]any
	if err := json.Unmarshal(line, &m); err != nil {
		t.Fatalf("got invalid JSON %s: %v", line, err)
	}
	if got, want := m["dom"], "d\u2028\t"; got != want {
		t.Errorf("dom: got %q, want %q", got, want)
	}
	if got, want := m["cost"], float64(-1); got != want {
		t.Errorf("cost: got %v, want %v", got, want)
	}
}

func TestDropPolicy(t *testing.T) {
	pr, pw := io.Pipe()
	defer pr.Close()
	// Read only the header, so the writer goroutine blocks on its first record and the
	// one-slot buffer fills.
	w, err := newWriterAsync(pw, Options{Buffer: 1})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = io.Copy(io.Discard, io.LimitReader(pr, 1)) }()
	for i := 0; i < 100; i++ {
		w.Write(Record{Kind: KindDecision, TimeMs: int64(i)})
	}
	if got := w.Dropped(); got < 90 {
		t.Errorf("dropped: got %d, want at least 90 of 100", got)
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	w.Write(Record{Kind: KindDecision})
	var nilW *Writer
	nilW.Write(Record{})
	if got := nilW.Dropped(); got != 0 {
		t.Errorf("nil writer dropped: got %d, want 0", got)
	}
}

// newWriterAsync is NewWriter for a pipe: the header write would block until read.
func newWriterAsync(w io.Writer, opts Options) (*Writer, error) {
	type res struct {
		w   *Writer
		err error
	}
	ch := make(chan res, 1)
	go func() {
		jw, err := NewWriter(w, Header{}, opts)
		ch <- res{jw, err}
	}()
	// The header (under 64 KiB) sits in the bufio.Writer, so NewWriter returns at once.
	r := <-ch
	return r.w, r.err
}

func TestReaderErrors(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
	}{
		{"empty", "", "empty input"},
		{"not json", "hello\n", "line 1: bad header"},
		{"other journal", `{"journal":"x","v":1}` + "\n", "not an rlctl journal"},
		{"future version", `{"journal":"rlctl","v":99}` + "\n", "version 99"},
		{"bad record", `{"journal":"rlctl","v":1}` + "\n" + `{"k":"d","t":1}` + "\n{oops\n" + `{"k":"d","t":2}` + "\n", "line 3:"},
		{"bad kind", `{"journal":"rlctl","v":1}` + "\n" + `{"k":"z","t":1}` + "\n", "journal: line 2: kind \"z\": unknown record kind"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := NewReader(strings.NewReader(tc.in))
			for err == nil {
				_, err = r.Next()
			}
			if errors.Is(err, io.EOF) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error containing %q", err, tc.want)
			}
			if strings.Count(err.Error(), "journal:") > 1 {
				t.Errorf("got %v, which says journal: twice", err)
			}
		})
	}
}

// A malformed last line is a record cut off by a crash: the reader ends before it and says
// where; the records before it and a bad line followed by others are read as usual.
func TestReaderCutLastLine(t *testing.T) {
	head := `{"journal":"rlctl","v":1}` + "\n" + `{"k":"d","t":1}` + "\n"
	for _, tc := range []struct {
		name, in string
		records  int
		cut      int
	}{
		{"cut mid-record", head + `{"k":"d","t":2,"do`, 1, 3},
		{"cut with a newline", head + "{\"k\":\"d\"\n", 1, 3},
		{"cut, then blank lines", head + "{\"k\":\"d\"\n\n\n", 1, 3},
		{"whole", head + `{"k":"d","t":2}` + "\n", 2, 0},
	} {
		r, err := NewReader(strings.NewReader(tc.in))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, err = r.Next(); err == nil; _, err = r.Next() {
			n++
		}
		if err != io.EOF || n != tc.records || r.Cut() != tc.cut {
			t.Errorf("%s: %d records, end %v, cut at %d; want %d, EOF, %d", tc.name, n, err, r.Cut(), tc.records, tc.cut)
		}
	}
}

// After a bad line, the lines that follow keep their numbers, blank ones included, and a
// read error is returned from then on.
func TestReaderAfterBadLine(t *testing.T) {
	in := `{"journal":"rlctl","v":1}` + "\n{oops\n\n" + `{"k":"d","t":2}` + "\n" + strings.Repeat("x", 2<<20) + "\n"
	r, err := NewReader(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Next(); err == nil || !strings.Contains(err.Error(), "line 2:") {
		t.Fatalf("bad line: got %v, want an error at line 2", err)
	}
	if rec, err := r.Next(); err != nil || rec.TimeMs != 2 || r.Line() != 4 {
		t.Fatalf("after it: got %+v, %v at line %d; want the record at line 4", rec, err, r.Line())
	}
	for i := 0; i < 2; i++ {
		if _, err := r.Next(); err == nil || !strings.Contains(err.Error(), "line 5:") || errors.Is(err, io.EOF) {
			t.Errorf("too long a line, call %d: got %v, want its error at line 5", i, err)
		}
	}
}

func BenchmarkWrite(b *testing.B) {
	w, err := NewWriter(io.Discard, Header{}, Options{})
	if err != nil {
		b.Fatal(err)
	}
	r := Record{Kind: KindDecision, TimeMs: 1, Domain: "edge", Rule: "bigcorp", Key: "edge|tenant=bigcorp", Cost: 1, Engine: CodeOK, Code: CodeOK, Via: ViaLease}
	b.ReportAllocs()
	for b.Loop() {
		w.Write(r)
	}
	b.StopTimer()
	_ = w.Close()
}

// fullDisk accepts n bytes, then fails every write as a full disk does.
type fullDisk struct{ n int }

func (d *fullDisk) Write(p []byte) (int, error) {
	if len(p) <= d.n {
		d.n -= len(p)
		return len(p), nil
	}
	n := d.n
	d.n = 0
	return n, errors.New("no space left on device")
}

// TestWriterCountsWhatTheDiskRefuses: records lost to a failed write or flush count as dropped,
// so that the enforcer's metric and the end record say the journal is incomplete; Close returns
// the error.
func TestWriterCountsWhatTheDiskRefuses(t *testing.T) {
	w, err := NewWriter(&fullDisk{n: 1 << 10}, Header{}, Options{Buffer: 1 << 12})
	if err != nil {
		t.Fatal(err)
	}
	const n = 3000
	for i := range n {
		w.Write(Record{Kind: KindDecision, TimeMs: int64(i), Key: "rl:edge:some-rule:user:someone"})
	}
	if err := w.Close(); err == nil {
		t.Fatal("Close: no error from a full disk")
	}
	// The disk took 1 KiB: the header and a dozen records at most. Every other record is
	// counted.
	if got := w.Dropped(); got < n-20 || got > n {
		t.Errorf("dropped: got %d of %d, want all but the few that fit in 1 KiB", got, n)
	}
}

// TestCloseContextHungDisk: a journal whose disk hangs gives up at the context's deadline.
func TestCloseContextHungDisk(t *testing.T) {
	pr, pw := io.Pipe() // never read: every write hangs
	defer pr.Close()
	w, err := newWriterAsync(pw, Options{Buffer: 16, Policy: Block})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 16 {
		w.Write(Record{Kind: KindDecision, TimeMs: int64(i)})
	}
	go func() { // writers that wait for room hold the lock Close needs
		for i := range 100 {
			w.Write(Record{Kind: KindDecision, TimeMs: int64(i)})
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = w.CloseContext(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("CloseContext on a hung disk: got %v, want the deadline's error", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("CloseContext took %v, want about the 100 ms deadline", took)
	}
}

// TestAbandonWakesBlockedWriters: under the Block policy, writers waiting for room on a disk
// that hangs return, their records dropped and counted, once the journal is abandoned; a
// shutdown waited for them forever.
func TestAbandonWakesBlockedWriters(t *testing.T) {
	pr, pw := io.Pipe() // never read: the disk hangs
	defer pr.Close()
	w, err := NewWriter(pw, Header{}, Options{Buffer: 1, Policy: Block}) // the header waits in bufio
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 1000 {
				w.Write(Record{Kind: KindDecision})
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		t.Fatal("8,000 records fitted a buffer of 1 on a disk that hangs")
	case <-time.After(50 * time.Millisecond):
	}
	w.Abandon()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("writers still waiting 5 s after Abandon")
	}
	if got := w.Dropped(); got == 0 || got > 8000 {
		t.Errorf("dropped %d, want the records the abandoned writers held", got)
	}
}
