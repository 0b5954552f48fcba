package simulate

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/rlctl/rlctl/schema"
	"github.com/rlctl/rlctl/simulate/traffic"
)

var benchLog struct {
	once sync.Once
	path string
	err  error
}

// benchFile generates the 1,000,000-line Envoy JSON log the replay benchmark reads, once.
func benchFile(b *testing.B) string {
	benchLog.once.Do(func() {
		// The file is named by a hash of the generator's first lines, so a changed generator
		// writes a new file and an unchanged one is reused across runs.
		var head bytes.Buffer
		if benchLog.err = traffic.Write(&head, traffic.Config{Seed: 1, Lines: 1000}); benchLog.err != nil {
			return
		}
		benchLog.path = filepath.Join(os.TempDir(), fmt.Sprintf("rlctl-bench-1m-%x.jsonl", sha256.Sum256(head.Bytes())))
		if st, err := os.Stat(benchLog.path); err == nil && st.Size() > 0 {
			return
		}
		var buf bytes.Buffer
		if benchLog.err = traffic.Write(&buf, traffic.Config{Seed: 1, Lines: 1_000_000}); benchLog.err != nil {
			return
		}
		benchLog.err = os.WriteFile(benchLog.path, buf.Bytes(), 0o644)
	})
	if benchLog.err != nil {
		b.Fatal(benchLog.err)
	}
	return benchLog.path
}

// BenchmarkReplay1M replays a generated 1,000,000-line Envoy JSON log end to end (read, parse,
// descriptors, 4 gateways with leasing, the ideal engine, the report) and reports lines/s, with
// the garbage collector set as rlctl simulate sets it (TuneGC). It also times `wc -l` on the
// same file as the floor.
func BenchmarkReplay1M(b *testing.B) {
	path := benchFile(b)
	m, err := schema.Load("../policies")
	if err != nil {
		b.Fatal(err)
	}
	var wcRate float64
	if wc, err := exec.LookPath("wc"); err == nil {
		start := time.Now()
		if err := exec.Command(wc, "-l", path).Run(); err == nil {
			wcRate = float64(1_000_000) / time.Since(start).Seconds()
		}
	}
	lat, _ := ParseLatency("1ms", 1)
	defer TuneGC()() // as rlctl simulate runs it
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		f, err := os.Open(path)
		if err != nil {
			b.Fatal(err)
		}
		r, err := Run(context.Background(), RunConfig{Sim: Config{Model: m, Gateways: 4, Latency: lat}, MaxBad: -1},
			[]Input{{Name: path, R: f}})
		f.Close()
		if err != nil {
			b.Fatal(err)
		}
		if r.Requests != 1_000_000 {
			b.Fatalf("requests: got %d, want 1000000", r.Requests)
		}
	}
	b.ReportMetric(float64(b.N)*1_000_000/b.Elapsed().Seconds(), "lines/s")
	if wcRate > 0 {
		// Reported last: ResetTimer drops the metrics reported before it.
		b.ReportMetric(wcRate, "wc-lines/s")
	}
}
