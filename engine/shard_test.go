package engine

import (
	"strconv"
	"testing"
)

func TestShard(t *testing.T) {
	limits := []Limit{{Requests: 1000, Window: second, Burst: 50}, {Algorithm: FixedWindow, Requests: 3, Window: second}}
	got := Shard(limits, 4)
	want := []Limit{{Requests: 250, Window: second, Burst: 12}, {Algorithm: FixedWindow, Requests: 1, Window: second}}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("step %d: got %+v, want %+v", i, got[i], want[i])
		}
		if err := got[i].Validate(); err != nil {
			t.Errorf("step %d: %v", i, err)
		}
	}
	if Shard(limits, 1)[0] != limits[0] {
		t.Error("one shard changed the limits")
	}
	counts := make([]int, 8)
	for i := range 8000 {
		counts[ShardOf("10.0.0."+strconv.Itoa(i), 8)]++
	}
	for i, c := range counts {
		if c < 800 || c > 1200 {
			t.Errorf("shard %d got %d of 8000 values", i, c)
		}
	}
	if ShardOf("x", 0) != 0 || ShardOf("x", 1) != 0 {
		t.Error("ShardOf with fewer than 2 shards is not 0")
	}
}
