package accesslog_test

import (
	"bytes"
	"io"
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
