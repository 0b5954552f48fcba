package simulate

import (
	"math"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// The garbage collector settings TuneMemory applies. The replay allocates steadily while its live
// heap (the keys) grows slowly, so collecting less often than Go's default saves time: with a
// GC percentage of 400 a 1,000,000-line replay took 4.6 s against 5.2 s at the default of
// 100. But the heap may then grow to five times the live heap (880 MB for 3,000,000 lines), so
// a soft memory limit of twice the live heap, and at least gcMinLimit, reins it in once the
// live heap is large (515 MB for the same replay, in the same time). The limit is raised as the
// live heap grows, so that a large replay does not spend its time collecting against a limit
// it has outgrown.
const (
	gcPercent  = 400
	gcMinLimit = 512 << 20
	gcFactor   = 2
	gcEvery    = 250 * time.Millisecond
)

// hugeAdvice is how much of the heap TuneMemory asks to be backed by huge pages: more than a
// replay of a few million lines uses (about 290 MB at its peak for the 1,000,000-line benchmark
// log). A larger heap faults its pages beyond it one by one, as without the advice.
const hugeAdvice = 1 << 30

// TuneMemory sets the garbage collector and the heap's pages for a replay, as rlctl simulate
// and BenchmarkReplay1M run it. It returns ready, which waits until the heap's pages are
// advised (call it before the replay allocates), and restore, which waits as ready does and
// then puts the previous collector settings back. The settings are process-wide, so Run leaves
// them to its callers.
//
// It asks for transparent huge pages on the heap's next hugeAdvice bytes, or as many as the
// user's memory limit if that is lower (adviseHugePages; on Linux a replay then takes a twelfth
// of the page faults and about an eighth less CPU). The runtime maps that gigabyte and then
// hands it back, which takes 10-15 ms, so it runs on a goroutine of its own: a caller loads its
// policies meanwhile, on the other core, and calls ready once it has them.
//
// Then the collector: a memory limit the user set (GOMEMLIMIT) is left alone, as the container
// it protects matters more than the time it costs; so is everything when the user set GOGC: a
// replay with GOGC=off, say, allocates the same whatever the timing of the collector, and
// counts the same instructions each time (COUNT=N scripts/ab-simulate.sh). The percentage is
// set at once, which spares the policies' loading most of its collections too; the soft limit
// only after the advice, as the advised block counts against it while it is allocated.
func TuneMemory() (ready, restore func()) {
	prevLimit := debug.SetMemoryLimit(-1) // reads it
	_, userGOGC := os.LookupEnv("GOGC")
	prevPercent := 0
	if !userGOGC {
		prevPercent = debug.SetGCPercent(gcPercent)
	}
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(sample)
	tuneLimit := !userGOGC && prevLimit == math.MaxInt64 && sample[0].Value.Kind() == metrics.KindUint64
	setLimit := func() {
		metrics.Read(sample)
		debug.SetMemoryLimit(max(gcMinLimit, gcFactor*int64(sample[0].Value.Uint64())))
	}

	advised, stop, done := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		adviseHugePages(int(min(hugeAdvice, prevLimit)))
		if !tuneLimit {
			close(advised)
			return
		}
		setLimit()
		close(advised)
		t := time.NewTicker(gcEvery)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				setLimit()
			case <-stop:
				return
			}
		}
	}()
	ready = func() { <-advised }
	restore = func() {
		close(stop) // the goroutine ends once it has advised the heap and seen this
		<-done
		if !userGOGC {
			debug.SetGCPercent(prevPercent)
		}
		if tuneLimit {
			debug.SetMemoryLimit(prevLimit)
		}
	}
	return ready, restore
}
