package accesslog_test

import (
	"bytes"
	"compress/gzip"
	"io"
	"sync"
	"testing"

	"github.com/rlctl/rlctl/simulate/accesslog"
	"github.com/rlctl/rlctl/simulate/traffic"
)

// BenchmarkReadEnvoyJSON parses generated Envoy JSON lines, capturing the headers the example
// policies read, as the simulator does.
func BenchmarkReadEnvoyJSON(b *testing.B) {
	var log bytes.Buffer
	if err := traffic.Write(&log, traffic.Config{Seed: 1, Lines: 10_000}); err != nil {
		b.Fatal(err)
	}
	opts := accesslog.Options{Headers: []string{"authorization", "x-api-key", "x-ja3", "x-ja4", "x-tenant-id"}}
	b.SetBytes(int64(log.Len()))
	b.ReportAllocs()
	var rec accesslog.Record
	var arena []byte
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		rd, err := accesslog.NewReader("bench", bytes.NewReader(log.Bytes()), opts)
		if err != nil {
			b.Fatal(err)
		}
		for {
			arena = arena[:0]
			err := rd.ReadArena(&rec, &arena)
			if err == io.EOF {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
		}
	}
}

// generated100k is a 100,000-line Envoy JSON log of traffic's, about 70 MB, made once.
var generated100k = sync.OnceValues(func() ([]byte, error) {
	var log bytes.Buffer
	err := traffic.Write(&log, traffic.Config{Seed: 1, Lines: 100_000})
	return log.Bytes(), err
})

var benchOptions = accesslog.Options{Headers: []string{"authorization", "x-api-key", "x-ja3", "x-ja4", "x-tenant-id"}}

// BenchmarkParseEnvoyJSON parses the lines of generated100k one at a time, as a worker of the
// simulator does: one op is one line, so ns/op is ns per line.
func BenchmarkParseEnvoyJSON(b *testing.B) {
	log, err := generated100k()
	if err != nil {
		b.Fatal(err)
	}
	rd, err := accesslog.NewReader("bench", bytes.NewReader(log), benchOptions)
	if err != nil {
		b.Fatal(err)
	}
	var lines []string
	var nums []int64
	var arena []byte
	for {
		line, num, err := rd.ReadRaw(&arena)
		if err == io.EOF {
			break
		}
		if err != nil {
			b.Fatal(err)
		}
		lines, nums = append(lines, line), append(nums, num)
	}
	p := rd.NewParser()
	b.SetBytes(int64(len(log) / len(lines)))
	b.ReportAllocs()
	var rec accesslog.Record
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		j := i % len(lines)
		if err := p.Parse(lines[j], nums[j], &rec); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReadRawGzip decompresses generated100k and splits it into lines with ReadRaw, as
// the simulator's reading goroutine does; MB/s counts the decompressed bytes.
func BenchmarkReadRawGzip(b *testing.B) {
	log, err := generated100k()
	if err != nil {
		b.Fatal(err)
	}
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	zw.Write(log)
	zw.Close()
	b.SetBytes(int64(len(log)))
	b.ReportAllocs()
	var arena []byte
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		rd, err := accesslog.NewReader("bench", bytes.NewReader(z.Bytes()), benchOptions)
		if err != nil {
			b.Fatal(err)
		}
		for {
			arena = arena[:0]
			_, _, err := rd.ReadRaw(&arena)
			if err == io.EOF {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
		}
		rd.Close()
	}
}
