package simulate

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/rlctl/rlctl/simulate/accesslog"
	"github.com/rlctl/rlctl/simulate/report"
	"github.com/rlctl/rlctl/simulate/traffic"
)

// A replay's memory follows its keys, not its lines: a log ten times as long over the same
// key population (the same generated lines, repeated ten times an hour apart) peaks at most
// 1.2 times the live heap of one repetition. Run holds, besides, a fixed number of chunks of
// lines in flight (runner.run).
func TestMemoryFollowsKeys(t *testing.T) {
	if testing.Short() {
		t.Skip("replays 440,000 lines")
	}
	m := examplePolicies(t)
	const lines = 40_000
	dir := t.TempDir()
	oneF, err := os.Create(filepath.Join(dir, "one.log"))
	if err != nil {
		t.Fatal(err)
	}
	tenF, err := os.Create(filepath.Join(dir, "ten.log"))
	if err != nil {
		t.Fatal(err)
	}
	one, ten := bufio.NewWriter(oneF), bufio.NewWriter(tenF)
	// The generated traffic spans 40 s from 12:00; the repetitions are the same lines an hour
	// apart, so that keys idle between them are pruned as they would be in a longer log.
	var rep bytes.Buffer
	if err := traffic.Write(&rep, traffic.Config{Seed: 4, Lines: lines}); err != nil {
		t.Fatal(err)
	}
	if _, err := one.Write(rep.Bytes()); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if _, err := ten.Write(bytes.ReplaceAll(rep.Bytes(), []byte("T12:"), fmt.Appendf(nil, "T%02d:", 12+i))); err != nil {
			t.Fatal(err)
		}
	}
	for _, w := range []*bufio.Writer{one, ten} {
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	oneF.Close()
	tenF.Close()
	// peak replays the log at path, one record at a time, and returns the most live heap
	// seen, less the live heap without the replay: the lower of the figures before it started
	// and after it was dropped, since what earlier tests left live (goroutines still ending)
	// may be freed meanwhile, and would otherwise count against the replay. It collects
	// garbage every 10,000 records and at the end, on the goroutine that replays, so that
	// nothing allocates while the collector marks: the figure is what the replay holds, not
	// what a collector running beside it happened to find.
	peak := func(path string, want int64) uint64 {
		t.Helper()
		lat, _ := ParseLatency("1ms", 1)
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		s, err := New(Config{Model: m, Gateways: 4, Latency: lat})
		if err != nil {
			t.Fatal(err)
		}
		rd, err := accesslog.NewReader(path, f, accesslog.Options{Headers: HeadersFor(m)})
		if err != nil {
			t.Fatal(err)
		}
		defer rd.Close()
		sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
		live := func() uint64 {
			runtime.GC()
			metrics.Read(sample)
			return sample[0].Value.Uint64()
		}
		before := live()
		var most uint64
		var rec accesslog.Record
		var n int64
		for rd.Read(&rec) == nil {
			if err := s.Replay(&rec); err != nil {
				t.Fatal(err)
			}
			if n++; n%10_000 == 0 {
				most = max(most, live())
			}
		}
		r, err := s.Finish()
		if err != nil {
			t.Fatal(err)
		}
		most = max(most, live())
		if r.Requests != want {
			t.Fatalf("requests: got %d, want %d", r.Requests, want)
		}
		runtime.KeepAlive(s)
		s, rec = nil, accesslog.Record{}
		floor := min(before, live())
		return most - min(most, floor)
	}
	base := peak(oneF.Name(), lines)
	long := peak(tenF.Name(), 10*lines)
	ratio := float64(long) / float64(base)
	t.Logf("peak live heap: %d lines %.1f MB, %d lines %.1f MB (%.2fx)", lines, float64(base)/1e6, 10*lines, float64(long)/1e6, ratio)
	if ratio > 1.2 {
		t.Errorf("ten times the lines over the same keys peaked at %.2fx the live heap; want at most 1.2x", ratio)
	}
}

// Past its bound on denied keys, a shard forgets the idle denied keys with the fewest
// denials, down to the bound, counts them, and the report says so. A denied key still in
// use is kept.
func TestDeniedKeysBound(t *testing.T) {
	s, err := New(Config{Model: testModel()})
	if err != nil {
		t.Fatal(err)
	}
	sh := s.shards[0]
	sh.deniedLimit = 2
	// k2 and k4 have as many denials: the one whose store key sorts first is dropped.
	for i, d := range []int64{5, 1, 9, 3, 9} {
		ks := sh.keys.newKeyState(0, 1)
		ks.lastMs, ks.keyDenials = 0, &keyDenials{key: fmt.Sprintf("k%d", i), denials: d}
		sh.keys.add(uint64(i), ks)
		sh.keys.denied++
	}
	busy := sh.keys.newKeyState(0, 1)
	busy.lastMs, busy.keyDenials = 10*3_600_000, &keyDenials{key: "busy", denials: 1} // denied, but not idle
	sh.keys.add(99, busy)
	sh.keys.denied++
	sh.prune(10 * 3_600_000)
	var kept []string
	sh.keys.each(func(ks *keyState) { kept = append(kept, ks.key) })
	slices.Sort(kept)
	if want := []string{"busy", "k4"}; !slices.Equal(kept, want) {
		t.Errorf("kept %v, want %v", kept, want)
	}
	if sh.droppedDenied != 4 || sh.keys.denied != 2 {
		t.Errorf("dropped %d, denied left %d; want 4 and 2", sh.droppedDenied, sh.keys.denied)
	}
	r, err := s.Finish()
	if err != nil {
		t.Fatal(err)
	}
	if r.DeniedKeysDropped != 4 || !slices.ContainsFunc(report.Warnings(r), func(w string) bool { return strings.Contains(w, "forgot the 4") }) {
		t.Errorf("report: dropped %d, warnings %q", r.DeniedKeysDropped, report.Warnings(r))
	}
}

// A key state fits the 384-byte size class, whose objects start on a cache line: a field more
// would take each of a replay's hundred thousand live keys to the 416-byte class, 8 % more
// memory, and start every other one in the middle of a line.
func TestKeyStateSize(t *testing.T) {
	if n := unsafe.Sizeof(keyState{}); n > 384 {
		t.Errorf("keyState is %d bytes, want at most 384", n)
	}
}

// TestDisplayValueBounded: a denied key's identity holds a long value as its first bytes, its
// length and a digest, so that the denied keys kept to the end of a replay are bounded in bytes
// as in number (values of a megabyte each had made the bound a gigabyte). Values a store key
// holds whole are shown whole.
func TestDisplayValueBounded(t *testing.T) {
	if got := displayValue("tenant-a"); got != "tenant-a" {
		t.Errorf("displayValue(tenant-a) = %q", got)
	}
	long := strings.Repeat("v", 1<<20)
	got := displayValue(long)
	if len(got) > 300 || !strings.Contains(got, "(1048576 bytes, sha256 ") {
		t.Errorf("displayValue of 1 MB: %d bytes, %.80q", len(got), got)
	}
	if displayValue(long+"x") == got {
		t.Error("two long values with one prefix display alike")
	}
}
