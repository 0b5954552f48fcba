package simulate

import (
	"math"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// The garbage collector settings TuneGC applies. The replay allocates steadily while its live
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

// TuneGC sets the garbage collector for a replay, as rlctl simulate and BenchmarkReplay1M run
// it, and returns a function that restores the previous settings. The settings are
// process-wide, so Run leaves them to its callers. A memory limit the user set (GOMEMLIMIT) is
// left alone: the container it protects matters more than the time it costs. So is everything
// when the user set GOGC: a replay with GOGC=off, say, allocates the same whatever the timing
// of the collector, and counts the same instructions each time (COUNT=N scripts/ab-simulate.sh).
func TuneGC() (restore func()) {
	if _, set := os.LookupEnv("GOGC"); set {
		return func() {}
	}
	prevPercent := debug.SetGCPercent(gcPercent)
	prevLimit := debug.SetMemoryLimit(-1) // reads it
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	if metrics.Read(sample); prevLimit != math.MaxInt64 || sample[0].Value.Kind() != metrics.KindUint64 {
		return func() { debug.SetGCPercent(prevPercent) }
	}
	setLimit := func() {
		metrics.Read(sample)
		debug.SetMemoryLimit(max(gcMinLimit, gcFactor*int64(sample[0].Value.Uint64())))
	}
	setLimit()
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
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
	return func() {
		close(stop)
		<-done
		debug.SetGCPercent(prevPercent)
		debug.SetMemoryLimit(prevLimit)
	}
}
