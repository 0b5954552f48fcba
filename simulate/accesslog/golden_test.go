package accesslog

import (
	"crypto/sha256"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rlctl/rlctl/internal/golden"
)

// TestReadGolden reads the test logs and FuzzRead's seed corpus in every format and compares a
// digest of what ReadArena returned for each (records, bad lines, read errors, Unseen and
// Line) with testdata/read.golden, so that a faster reader or parser reads exactly what the
// one before it did. A change meant to alter what is read regenerates the file with -update.
func TestReadGolden(t *testing.T) {
	defer func(size int) { bufferSize = size }(bufferSize)
	type input struct {
		name   string
		log    string
		buffer int
	}
	var inputs []input
	for _, name := range testLogs {
		inputs = append(inputs, input{name, readTestLog(t, name), bufferSize})
	}
	logs, buffers := corpus(t, "FuzzRead")
	files, _ := filepath.Glob(filepath.Join("testdata", "fuzz", "FuzzRead", "*"))
	for i, log := range logs {
		inputs = append(inputs, input{"FuzzRead/" + filepath.Base(files[i]), log, 16 + int(buffers[i])%4081})
	}
	var got strings.Builder
	for _, in := range inputs {
		bufferSize = in.buffer
		for _, format := range parseFormats {
			fmt.Fprintf(&got, "%s %s %s\n", in.name, formatName(format), readDigest(in.log, parseOptions(format)))
		}
	}
	golden.Check(t, filepath.Join("testdata", "read.golden"), []byte(got.String()))
}

func formatName(f Format) string {
	if f == FormatAuto {
		return "auto"
	}
	return string(f)
}

// readDigest reads log with ReadArena and sums up what it read: the number of records and of
// bad lines, and a SHA-256 of every result, Unseen and Line at the end.
func readDigest(log string, opts Options) string {
	rd, err := NewReader("log", strings.NewReader(log), opts)
	if err != nil {
		return fmt.Sprintf("NewReader: %.40q", err.Error())
	}
	h := sha256.New()
	var records, bad int
	var rec Record
	var arena []byte
	for i := 0; ; i++ {
		if i%3 == 2 {
			arena = arena[:0]
		}
		err := rd.ReadArena(&rec, &arena)
		if err == io.EOF {
			break
		}
		fmt.Fprintln(h, result(err, &rec))
		if err == nil {
			records++
			continue
		}
		if _, ok := err.(*LineError); !ok {
			break
		}
		bad++
	}
	fmt.Fprintln(h, rd.Unseen(), rd.Line())
	return fmt.Sprintf("records=%d bad=%d sha256=%x", records, bad, h.Sum(nil)[:12])
}
