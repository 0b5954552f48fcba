package accesslog

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"testing"
	"time"
)

// gzipLog returns lines JSON lines, numbered from first, gzip-compressed.
func gzipLog(t *testing.T, first, lines int) []byte {
	t.Helper()
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	for i := first; i < first+lines; i++ {
		fmt.Fprintf(zw, `{"start_time":"2024-05-01T12:00:00Z","path":"/a/%d","pad":"%s"}`+"\n", i, strings.Repeat("x", 200))
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return z.Bytes()
}

// readAheadsLeft waits up to a second for every read-ahead goroutine to end, and returns how
// many are left.
func readAheadsLeft() int {
	buf := make([]byte, 1<<20)
	deadline := time.Now().Add(time.Second)
	for {
		n := strings.Count(string(buf[:runtime.Stack(buf, true)]), "(*readAhead).fill")
		if n == 0 || time.Now().After(deadline) {
			return n
		}
		runtime.GC() // runs the cleanup of a Reader dropped without Close
		time.Sleep(10 * time.Millisecond)
	}
}

// A gzip file of several members, as `cat a.gz b.gz` makes, reads as one log.
func TestGzipMembers(t *testing.T) {
	log := append(gzipLog(t, 0, 3000), gzipLog(t, 3000, 5)...)
	recs, bad := readAll(t, string(log), Options{})
	if len(bad) != 0 || len(recs) != 3005 {
		t.Fatalf("got %d records, %d bad lines; want 3005, 0", len(recs), len(bad))
	}
	for i, rec := range recs {
		if want := fmt.Sprintf("/a/%d", i); rec.Path != want || rec.Line != int64(i+1) {
			t.Fatalf("record %d: line %d, path %q; want line %d, path %q", i, rec.Line, rec.Path, i+1, want)
		}
	}
}

// A gzip log's read-ahead goroutine ends with Close, wherever the reader stopped, with
// NewReader's error, and when a Reader is dropped without Close.
func TestCloseStopsReadAhead(t *testing.T) {
	if n := readAheadsLeft(); n != 0 {
		t.Fatalf("%d read-aheads running before the test", n)
	}
	log := gzipLog(t, 0, 50_000) // 12 MB: more than the read-ahead holds
	for _, lines := range []int{0, 1, 10_000} {
		rd, err := NewReader("x.log.gz", bytes.NewReader(log), Options{})
		if err != nil {
			t.Fatal(err)
		}
		var arena []byte
		for range lines {
			if _, _, err := rd.ReadRaw(&arena); err != nil {
				t.Fatal(err)
			}
		}
		for range 2 {
			if err := rd.Close(); err != nil {
				t.Errorf("Close after %d lines: %v", lines, err)
			}
		}
		if n := readAheadsLeft(); n != 0 {
			t.Errorf("closed after %d lines: %d read-aheads left", lines, n)
		}
		if _, _, err := rd.ReadRaw(&arena); err == nil || err == io.EOF || !errors.Is(err, errClosed) {
			t.Errorf("ReadRaw after Close: got %v, want %v", err, errClosed)
		}
	}

	var csv bytes.Buffer
	zw := gzip.NewWriter(&csv)
	io.WriteString(zw, "path,tenant\n/a,acme\n")
	zw.Close()
	if _, err := NewReader("x.csv.gz", &csv, Options{}); err == nil {
		t.Fatalf("NewReader of a CSV log without a time column: no error")
	}
	if n := readAheadsLeft(); n != 0 {
		t.Errorf("after NewReader's error: %d read-aheads left", n)
	}

	func() {
		rd, err := NewReader("x.log.gz", bytes.NewReader(log), Options{})
		if err != nil {
			t.Fatal(err)
		}
		var arena []byte
		rd.ReadRaw(&arena)
	}()
	if n := readAheadsLeft(); n != 0 {
		t.Errorf("a Reader dropped without Close: %d read-aheads left", n)
	}

	plain, err := NewReader("x.log", strings.NewReader(`{"start_time":1}`), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := plain.Close(); err != nil {
		t.Errorf("Close of a log that is not gzip: %v", err)
	}
}

// A log that arrives slowly through a pipe is read as it arrives, and Close ends a read that
// waits for more once the read-ahead's own read of the pipe returns.
func TestCloseDuringRead(t *testing.T) {
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	for i := range 300 {
		if i == 200 {
			zw.Flush() // the first 200 lines can be decompressed from what precedes
		}
		fmt.Fprintf(zw, `{"start_time":"2024-05-01T12:00:00Z","path":"/a/%d"}`+"\n", i)
	}
	arrived := z.Len()
	zw.Close()
	pr, pw := io.Pipe()
	go pw.Write(z.Bytes()[:arrived])
	rd, err := NewReader("x.log.gz", pr, Options{})
	if err != nil {
		t.Fatal(err)
	}
	records, read := make(chan int64), make(chan error)
	go func() {
		var rec Record
		for {
			if err := rd.Read(&rec); err != nil {
				read <- err
				return
			}
			records <- rec.Line
		}
	}()
	for want := int64(1); want <= 200; want++ {
		select {
		case got := <-records:
			if got != want {
				t.Fatalf("read line %d, want %d", got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("line %d arrived and was not read", want)
		}
	}
	closed := make(chan struct{})
	go func() {
		rd.Close()
		close(closed)
	}()
	select {
	case <-closed:
		t.Fatal("Close returned while the read-ahead was reading the pipe")
	case <-time.After(50 * time.Millisecond):
	}
	pw.CloseWithError(errors.New("the writer stopped"))
	<-closed
	if err := <-read; !errors.Is(err, errClosed) {
		t.Errorf("the read Close ended: got %v, want %v", err, errClosed)
	}
	if n := readAheadsLeft(); n != 0 {
		t.Errorf("%d read-aheads left", n)
	}
}
