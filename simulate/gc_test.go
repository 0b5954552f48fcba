package simulate

import (
	"math"
	"runtime/debug"
	"testing"
)

// TuneGC sets the collector's percentage and a soft memory limit of at least gcMinLimit, and
// its restore function puts the previous settings back.
func TestTuneGC(t *testing.T) {
	prevPercent := debug.SetGCPercent(150)
	defer debug.SetGCPercent(prevPercent)
	prevLimit := debug.SetMemoryLimit(math.MaxInt64)
	defer debug.SetMemoryLimit(prevLimit)

	restore := TuneGC()
	percent := debug.SetGCPercent(GCPercent)
	limit := debug.SetMemoryLimit(-1)
	restore()
	if percent != GCPercent || limit < gcMinLimit || limit == math.MaxInt64 {
		t.Errorf("tuned: GC percent %d, memory limit %d; want %d and at least %d", percent, limit, GCPercent, gcMinLimit)
	}
	if percent, limit := debug.SetGCPercent(150), debug.SetMemoryLimit(-1); percent != 150 || limit != math.MaxInt64 {
		t.Errorf("restored: GC percent %d, memory limit %d; want 150 and no limit", percent, limit)
	}
}
