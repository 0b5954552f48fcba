package simulate

import (
	"math"
	"os"
	"runtime/debug"
	"testing"
)

// TuneMemory sets the collector's percentage at once and, unless the user set a memory limit, a
// soft limit of at least gcMinLimit by the time ready returns; restore puts the previous
// settings back.
func TestTuneMemory(t *testing.T) {
	if gogc, set := os.LookupEnv("GOGC"); set {
		// TuneMemory leaves the collector alone (TestTuneMemoryKeepsGOGC); restored after the
		// test.
		os.Unsetenv("GOGC")
		defer os.Setenv("GOGC", gogc)
	}
	prevPercent := debug.SetGCPercent(150)
	defer debug.SetGCPercent(prevPercent)
	prevLimit := debug.SetMemoryLimit(math.MaxInt64)
	defer debug.SetMemoryLimit(prevLimit)

	for _, tt := range []struct {
		name      string
		userLimit int64 // math.MaxInt64: none
		minLimit  int64 // the tuned limit is at least this
		maxLimit  int64 // and at most this
	}{
		{"no user limit", math.MaxInt64, gcMinLimit, math.MaxInt64 - 1},
		{"user limit kept", 100 << 20, 100 << 20, 100 << 20},
	} {
		debug.SetMemoryLimit(tt.userLimit)
		ready, restore := TuneMemory()
		// The percentage is set before TuneMemory returns, for the policies' loading; the limit
		// once the heap is advised.
		if early := debug.SetGCPercent(gcPercent); early != gcPercent {
			t.Errorf("%s: GC percent %d before ready; want %d", tt.name, early, gcPercent)
		}
		ready()
		percent := debug.SetGCPercent(gcPercent)
		limit := debug.SetMemoryLimit(-1)
		restore()
		if percent != gcPercent || limit < tt.minLimit || limit > tt.maxLimit {
			t.Errorf("%s: tuned GC percent %d, memory limit %d; want %d and %d to %d", tt.name, percent, limit, gcPercent, tt.minLimit, tt.maxLimit)
		}
		if percent, limit := debug.SetGCPercent(150), debug.SetMemoryLimit(-1); percent != 150 || limit != tt.userLimit {
			t.Errorf("%s: restored GC percent %d, memory limit %d; want 150 and %d", tt.name, percent, limit, tt.userLimit)
		}
	}
}

// With GOGC set, TuneMemory changes neither the percentage nor the memory limit.
func TestTuneMemoryKeepsGOGC(t *testing.T) {
	t.Setenv("GOGC", "150")
	prevPercent := debug.SetGCPercent(150)
	defer debug.SetGCPercent(prevPercent)
	prevLimit := debug.SetMemoryLimit(math.MaxInt64)
	defer debug.SetMemoryLimit(prevLimit)

	ready, restore := TuneMemory()
	ready()
	percent, limit := debug.SetGCPercent(150), debug.SetMemoryLimit(-1)
	restore()
	if percent != 150 || limit != math.MaxInt64 {
		t.Errorf("with GOGC set: GC percent %d, memory limit %d; want 150 and none", percent, limit)
	}
}
