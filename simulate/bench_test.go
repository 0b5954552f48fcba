package simulate

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sync"
	"testing"
	"time"

	"compress/gzip"
	"github.com/rlctl/rlctl/simulate/accesslog"
	"github.com/rlctl/rlctl/simulate/traffic"
)

// benchLines is the length of the replay benchmarks' logs.
const benchLines = 1_000_000

var benchLogs struct {
	sync.Mutex
	paths map[string]string
}

// benchFile generates, once, the 1,000,000-line log the replay benchmark reads: format's
// lines, gzip-compressed when gz is set. A file is named by a hash of the generator's first
// lines, so a changed generator writes a new file and an unchanged one is reused across runs.
func benchFile(b *testing.B, format traffic.Format, gz bool) string {
	benchLogs.Lock()
	defer benchLogs.Unlock()
	name := fmt.Sprintf("%s-%v", format, gz)
	if p, ok := benchLogs.paths[name]; ok {
		return p
	}
	var head bytes.Buffer
	if err := traffic.Write(&head, traffic.Config{Seed: 1, Lines: 1000, Format: format}); err != nil {
		b.Fatal(err)
	}
	ext := ".jsonl"
	if gz {
		ext += ".gz"
	}
	path := filepath.Join(os.TempDir(), fmt.Sprintf("rlctl-bench-1m-%x%s", sha256.Sum256(head.Bytes()), ext))
	if st, err := os.Stat(path); err != nil || st.Size() == 0 {
		if err := writeBenchFile(path, format, gz); err != nil {
			b.Fatal(err)
		}
	}
	if benchLogs.paths == nil {
		benchLogs.paths = map[string]string{}
	}
	benchLogs.paths[name] = path
	return path
}

func writeBenchFile(path string, format traffic.Format, gz bool) error {
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	var zw *gzip.Writer
	var w interface{ Write([]byte) (int, error) } = f
	if gz {
		zw = gzip.NewWriter(f)
		w = zw
	}
	if err := traffic.Write(w, traffic.Config{Seed: 1, Lines: benchLines, Format: format}); err != nil {
		f.Close()
		return err
	}
	if zw != nil {
		if err := zw.Close(); err != nil {
			f.Close()
			return err
		}
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// BenchmarkReplay1M replays a generated 1,000,000-line log end to end (read, parse,
// descriptors, 4 gateways with leasing, the ideal engine, the report) and reports lines/s,
// with the garbage collector set as rlctl simulate sets it (TuneMemory), on every core
// GOMAXPROCS gives it (-cpu 1,2 shows the scaling). Each shape of log is a sub-benchmark:
// Envoy JSON as gen-logs writes it, Istio's default JSON access log, and the Envoy log
// gzip-compressed. It also times `wc -l` on the same file (`zcat | wc -l` for gzip) as the
// floor, and reports the ratio.
//
// rlctl is built with profile-guided optimisation (cmd/rlctl/default.pgo), and a test binary
// is not unless asked: to time the replay as rlctl runs it, pass the profile, as in
//
//	go test ./simulate -run '^$' -bench Replay1M -count 3 -pgo=$PWD/cmd/rlctl/default.pgo
func BenchmarkReplay1M(b *testing.B) {
	m := examplePolicies(b)
	for _, c := range []struct {
		name   string
		format traffic.Format
		gz     bool
	}{{"envoy-json", traffic.EnvoyJSON, false}, {"istio-json", traffic.IstioJSON, false}, {"envoy-json.gz", traffic.EnvoyJSON, true}} {
		b.Run(c.name, func(b *testing.B) {
			path := benchFile(b, c.format, c.gz)
			wcRate := wcLines(path, c.gz)
			lat, _ := ParseLatency("1ms", 1)
			ready, restore := TuneMemory() // as rlctl simulate runs it
			defer restore()
			ready()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				// Each replay starts as rlctl simulate's one does, on an empty heap of memory
				// it has yet to fault in: the last replay's garbage, left for a collection
				// during this one, would have it mark what no CLI run does, and its pages,
				// kept (the benchmark's runtime.GC before each round of b.N keeps them),
				// would spare it the faults a CLI run takes.
				b.StopTimer()
				debug.FreeOSMemory()
				b.StartTimer()
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
				if r.Requests != benchLines {
					b.Fatalf("requests: got %d, want %d", r.Requests, benchLines)
				}
			}
			rate := float64(b.N) * benchLines / b.Elapsed().Seconds()
			b.ReportMetric(rate, "lines/s")
			if wcRate > 0 {
				// Reported last: ResetTimer drops the metrics reported before it.
				b.ReportMetric(wcRate, "wc-lines/s")
				b.ReportMetric(wcRate/rate, "x-wc")
			}
		})
	}
}

// wcLines times `wc -l` on path (`gzip -dc | wc -l` when gz) and returns lines/s, or 0 when
// the tools are missing. It reads the file once untimed first: the replays that follow read it
// from the page cache, and so must the floor they are compared with. (The development machine
// pages out files idle for a minute: a cold read made `wc -l` read 0.8M lines/s, not 7M.)
func wcLines(path string, gz bool) float64 {
	cmd := "wc -l < " + path
	if gz {
		cmd = "gzip -dc < " + path + " | wc -l"
	}
	sh, err := exec.LookPath("sh")
	if err != nil {
		return 0
	}
	if err := exec.Command(sh, "-c", "cat < "+path+" > /dev/null").Run(); err != nil {
		return 0
	}
	start := time.Now()
	if err := exec.Command(sh, "-c", cmd).Run(); err != nil {
		return 0
	}
	return benchLines / time.Since(start).Seconds()
}

// decideLines is the length of BenchmarkDecide's log.
const decideLines = 200_000

// benchRecords generates decideLines lines of gen-logs' Envoy JSON and parses them for
// BenchmarkDecide and BenchmarkPrepare, with the configuration BenchmarkReplay1M replays with.
// Every line keeps its own bytes: records, and values prepared from them, view them.
func benchRecords(b *testing.B) (Config, []accesslog.Record) {
	m := examplePolicies(b)
	var log bytes.Buffer
	if err := traffic.Write(&log, traffic.Config{Seed: 1, Lines: decideLines, Format: traffic.EnvoyJSON}); err != nil {
		b.Fatal(err)
	}
	lat, _ := ParseLatency("1ms", 1)
	cfg := Config{Model: m, Gateways: 4, Latency: lat}
	rd, err := accesslog.NewReader("bench", bytes.NewReader(log.Bytes()), accesslog.Options{Headers: HeadersFor(m)})
	if err != nil {
		b.Fatal(err)
	}
	var arena []byte
	var recs []accesslog.Record
	parser := rd.NewParser()
	for {
		line, num, err := rd.ReadRaw(&arena)
		if err == io.EOF {
			break
		}
		if err != nil {
			b.Fatal(err)
		}
		recs = append(recs, accesslog.Record{})
		if err := parser.Parse(line, num, &recs[len(recs)-1]); err != nil {
			b.Fatal(err)
		}
	}
	return cfg, recs
}

// BenchmarkDecide times the replay's decisions alone: records parsed and prepared before the
// timer starts are sequenced, decided by every shard and counted on one goroutine (Replay
// without its prepare). It is the half of a replay that runs on the shard workers, measured
// without the pipeline, the parsing and the other core, so that a change to the engine or the
// shards shows in a few runs on a noisy machine. It reports ns/line and ns/decision.
func BenchmarkDecide(b *testing.B) {
	cfg, recs := benchRecords(b)
	preps := make([]prepared, len(recs))
	var decisions int64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		s, err := New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		rb := s.newBuilder()
		var buf prepBuffers
		for j := range recs {
			s.prepare(&preps[j], rb, &recs[j], &buf)
		}
		runtime.GC()
		b.StartTimer()
		for j := range recs {
			if err := s.replayPrepared(&preps[j], &recs[j]); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		r, err := s.Finish()
		if err != nil {
			b.Fatal(err)
		}
		decisions = r.Totals.Decisions
		b.StartTimer()
	}
	ns := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	b.ReportMetric(ns/float64(len(recs)), "ns/line")
	b.ReportMetric(ns/float64(decisions), "ns/decision")
}

// BenchmarkPrepare times what the parsing workers do to a record once it is parsed: the
// request, its descriptor values, the rules they select and their store keys (prepare), on
// one goroutine over records parsed before the timer starts. With BenchmarkDecide and
// accesslog's BenchmarkParseEnvoyJSON it splits a replay's CPU by stage. Every record is
// prepared into one buffer, reset each time, so the figure leaves out how a chunk's records lie
// in memory (prepBuffers). It reports ns/line.
func BenchmarkPrepare(b *testing.B) {
	cfg, recs := benchRecords(b)
	s, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	rb := s.newBuilder()
	var p prepared
	var buf prepBuffers
	hits := 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		hits = 0
		for j := range recs {
			buf.reset()
			s.prepare(&p, rb, &recs[j], &buf)
			hits += len(p.hits)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(recs)), "ns/line")
	b.ReportMetric(float64(hits)/float64(len(recs)), "hits/line")
}
