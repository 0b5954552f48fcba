package accesslog

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// parseOptions are the options the parse tests read a log in format with: a captured header,
// and for JSON a dotted and a plain mapping, one of which a log may lack (Unseen).
func parseOptions(format Format) Options {
	opts := Options{Format: format, Headers: []string{"x-tenant-id"}}
	if format == FormatEnvoyJSON || format == FormatJSONL {
		opts.Mapping = Mapping{"x-tenant-id": "a.b", "x-plan": "plan"}
	}
	return opts
}

// checkParse reads log in format with ReadArena, and again with ReadRaw and three Parsers taking
// turns: every result (record, bad line, read error or io.EOF) and Unseen must be the same.
func checkParse(t *testing.T, format Format, log string) {
	t.Helper()
	opts := parseOptions(format)
	want, werr := NewReader("log", strings.NewReader(log), opts)
	got, gerr := NewReader("log", strings.NewReader(log), opts)
	if werr != nil || gerr != nil {
		if !sameResult(werr, gerr) {
			t.Fatalf("%s: NewReader: %v, then %v", format, werr, gerr)
		}
		return
	}
	parsers := []*Parser{got.NewParser(), got.NewParser(), got.NewParser()}
	var warena, garena []byte
	var wrec, grec Record
	for i := 0; ; i++ {
		if i%3 == 2 {
			warena, garena = warena[:0], garena[:0]
		}
		werr := want.ReadArena(&wrec, &warena)
		line, num, gerr := got.ReadRaw(&garena)
		if gerr == nil {
			gerr = parsers[i%len(parsers)].Parse(line, num, &grec)
		}
		if !sameResult(werr, gerr) {
			t.Fatalf("%s: result %d: ReadArena returned %v, ReadRaw and Parse %v", format, i, werr, gerr)
		}
		if werr == nil && !reflect.DeepEqual(wrec, grec) {
			t.Fatalf("%s: line %d: ReadArena read %+v, ReadRaw and Parse %+v", format, wrec.Line, wrec, grec)
		}
		var le *LineError
		if werr != nil && !errors.As(werr, &le) {
			break // io.EOF or a read error
		}
	}
	if w, g := want.Unseen(), got.Unseen(); !slices.Equal(w, g) {
		t.Fatalf("%s: Unseen after ReadArena %v, after ReadRaw and Parse %v", format, w, g)
	}
	if w, g := want.Line(), got.Line(); w != g {
		t.Fatalf("%s: Line() at the end: ReadArena %d, ReadRaw %d", format, w, g)
	}
}

var parseFormats = []Format{FormatAuto, FormatEnvoyJSON, FormatJSONL, FormatEnvoyText, FormatCSV}

// testLogs are the logs of testdata, written by simulate/traffic with lines of every kind
// added at the end: blank ones, one with CRLF and the mapped keys, bad ones.
var testLogs = []string{"envoy-json.log", "envoy-text.log"}

func readTestLog(t testing.TB, name string) string {
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// corpus returns the inputs of testdata/fuzz/name, the seed corpus of a fuzz target whose
// arguments are (string, uint16).
func corpus(t testing.TB, name string) (inputs []string, buffers []uint16) {
	files, err := filepath.Glob(filepath.Join("testdata", "fuzz", name, "*"))
	if err != nil || len(files) == 0 {
		t.Fatalf("corpus %s: %v, %d files", name, err, len(files))
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var s string
		var n uint64
		for _, l := range strings.Split(string(b), "\n") {
			switch {
			case strings.HasPrefix(l, "string("):
				s, err = strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(l, "string("), ")"))
			case strings.HasPrefix(l, "uint16("):
				n, err = strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(l, "uint16("), ")"), 10, 16)
			}
			if err != nil {
				t.Fatalf("%s: %q: %v", f, l, err)
			}
		}
		inputs, buffers = append(inputs, s), append(buffers, uint16(n))
	}
	return inputs, buffers
}

// TestParseMatchesReadArena checks ReadRaw and Parse against ReadArena on the test logs and on
// FuzzRead's seed corpus, in every format.
func TestParseMatchesReadArena(t *testing.T) {
	defer func(size int) { bufferSize = size }(bufferSize)
	for _, name := range testLogs {
		for _, format := range parseFormats {
			checkParse(t, format, readTestLog(t, name))
		}
	}
	inputs, buffers := corpus(t, "FuzzRead")
	for i, input := range inputs {
		bufferSize = 16 + int(buffers[i])%4081
		for _, format := range parseFormats {
			checkParse(t, format, input)
		}
	}
}

// FuzzParse checks ReadRaw and Parse against ReadArena (checkParse) on FuzzRead's inputs, with
// buffers from 16 bytes as FuzzRead has them.
func FuzzParse(f *testing.F) {
	f.Cleanup(func(size int) func() { return func() { bufferSize = size } }(bufferSize))
	inputs, buffers := corpus(f, "FuzzRead")
	for i := range inputs {
		f.Add(inputs[i], buffers[i])
	}
	f.Fuzz(func(t *testing.T, input string, buffer uint16) {
		bufferSize = 16 + int(buffer)%4081
		for _, format := range parseFormats {
			checkParse(t, format, input)
		}
	})
}

// TestParseConcurrently reads a log as the simulator does: one goroutine reads raw lines in
// batches, several parse the batches at once, and the results are put back in log order. They
// must be ReadArena's, and Unseen must count every parser's lines. Run it with -race.
func TestParseConcurrently(t *testing.T) {
	log := strings.Repeat(readTestLog(t, "envoy-json.log"), 30)
	opts := parseOptions(FormatEnvoyJSON)
	opts.Mapping["x-org"] = "org" // a key no line has
	want := readResults(t, log, opts)

	rd, err := NewReader("log", strings.NewReader(log), opts)
	if err != nil {
		t.Fatal(err)
	}
	type batch struct {
		lines []string
		nums  []int64
		out   []string // each line's result, as readResults gives it
		arena []byte
		done  chan struct{}
	}
	batches := make(chan *batch, 4)
	inOrder := make(chan *batch, 16)
	var workers sync.WaitGroup
	for range 3 {
		p := rd.NewParser()
		workers.Go(func() {
			var rec Record
			for b := range batches {
				for i, line := range b.lines {
					b.out = append(b.out, result(p.Parse(line, b.nums[i], &rec), &rec))
				}
				close(b.done)
			}
		})
	}
	go func() {
		defer close(batches)
		defer close(inOrder)
		for {
			b := &batch{done: make(chan struct{})}
			var err error
			for len(b.lines) < 64 {
				var line string
				var num int64
				if line, num, err = rd.ReadRaw(&b.arena); err != nil {
					break
				}
				b.lines, b.nums = append(b.lines, line), append(b.nums, num)
			}
			batches <- b
			inOrder <- b
			if err != nil {
				if err != io.EOF {
					t.Errorf("ReadRaw: %v", err)
				}
				return
			}
		}
	}()
	var got []string
	for b := range inOrder {
		<-b.done
		got = append(got, b.out...)
	}
	workers.Wait()
	if !slices.Equal(got, want.results) {
		t.Fatalf("got %d results, want %d; first difference at %d", len(got), len(want.results), firstDiff(got, want.results))
	}
	if g := rd.Unseen(); !slices.Equal(g, want.unseen) {
		t.Errorf("Unseen: got %v, want %v", g, want.unseen)
	}
}

type results struct {
	results []string
	unseen  []string
}

// readResults reads log with ReadArena: a line for each record and bad line, and Unseen.
func readResults(t *testing.T, log string, opts Options) results {
	rd, err := NewReader("log", strings.NewReader(log), opts)
	if err != nil {
		t.Fatal(err)
	}
	var out results
	var rec Record
	var arena []byte
	for {
		err := rd.ReadArena(&rec, &arena)
		if err == io.EOF {
			out.unseen = rd.Unseen()
			return out
		}
		out.results = append(out.results, result(err, &rec))
	}
}

func result(err error, rec *Record) string {
	if err != nil {
		var le *LineError
		if errors.As(err, &le) {
			return fmt.Sprintf("%s:%d: %v [%s]", le.File, le.Line, le.Err, le.Text)
		}
		return err.Error()
	}
	return fmt.Sprintf("%+v", *rec)
}

func firstDiff(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
