package policy

import (
	"hash/fnv"
	"testing"
)

// TestCanaryBucket pins the buckets of a few instance IDs: changing the hash would move
// instances in and out of every canary at upgrade.
func TestCanaryBucket(t *testing.T) {
	tests := []struct {
		id   string
		want int
	}{
		{"pod-a", 86}, {"pod-b", 75}, {"gw-0", 54}, {"gw-1", 65}, {"", 37},
	}
	for i, tt := range tests {
		if got := CanaryBucket(tt.id); got != tt.want {
			t.Errorf("step %d: CanaryBucket(%q) = %d, want %d", i, tt.id, got, tt.want)
		}
		h := fnv.New64a()
		h.Write([]byte(tt.id))
		if got, want := CanaryBucket(tt.id), int(h.Sum64()%100); got != want {
			t.Errorf("step %d: CanaryBucket(%q) = %d, want FNV-1a %d", i, tt.id, got, want)
		}
	}
}

func TestRuleMode(t *testing.T) {
	// pod-a is in bucket 86, pod-b in 75.
	tests := []struct {
		stage    StageName
		percent  int
		instance string
		want     Mode
	}{
		{StageEnforce, 0, "pod-a", ModeEnforce},
		{"", 0, "pod-a", ModeEnforce},
		{StageShadow, 100, "pod-a", ModeShadow},
		{StageSoft, 100, "pod-a", ModeSoft},
		{StageCanary, 0, "pod-a", ModeSoft},
		{StageCanary, 86, "pod-a", ModeSoft},
		{StageCanary, 87, "pod-a", ModeEnforce},
		{StageCanary, 86, "pod-b", ModeEnforce},
		{StageCanary, 75, "pod-b", ModeSoft},
		{StageCanary, 100, "pod-b", ModeEnforce},
		{"bogus", 0, "pod-a", ModeEnforce},
	}
	for i, tt := range tests {
		r := &Rule{Name: "r", Stage: Stage{Name: tt.stage, CanaryPercent: tt.percent}}
		if got := r.Mode(tt.instance); got != tt.want {
			t.Errorf("step %d: %s %d%% on %s: got %v, want %v", i, tt.stage, tt.percent, tt.instance, got, tt.want)
		}
	}
}

func TestStageNameValid(t *testing.T) {
	for _, n := range []StageName{StageShadow, StageSoft, StageCanary, StageEnforce, ""} {
		if !n.Valid() {
			t.Errorf("%q: not valid", n)
		}
	}
	if StageName("enforced").Valid() {
		t.Error(`"enforced": valid`)
	}
}

func TestStageOrder(t *testing.T) {
	tests := []struct {
		n     StageName
		index int
		next  StageName
		ok    bool
	}{
		{StageShadow, 0, StageSoft, true},
		{StageSoft, 1, StageCanary, true},
		{StageCanary, 2, StageEnforce, true},
		{StageEnforce, 3, "", false},
		{"", -1, "", false},
		{"dark", -1, "", false},
	}
	for i, tt := range tests {
		if got := tt.n.Index(); got != tt.index {
			t.Errorf("step %d: %q.Index() = %d, want %d", i, tt.n, got, tt.index)
		}
		if got, ok := tt.n.Next(); got != tt.next || ok != tt.ok {
			t.Errorf("step %d: %q.Next() = %q, %v, want %q, %v", i, tt.n, got, ok, tt.next, tt.ok)
		}
	}
}

func TestDomainDwell(t *testing.T) {
	d := &Domain{Governance: Governance{ShadowDwellMs: 1, SoftDwellMs: 2}}
	for i, tt := range []struct {
		stage StageName
		want  int64
	}{{StageShadow, 1}, {StageSoft, 2}, {StageCanary, 0}, {StageEnforce, 0}, {"", 0}} {
		if got := d.Dwell(tt.stage); got != tt.want {
			t.Errorf("step %d: Dwell(%q) = %d, want %d", i, tt.stage, got, tt.want)
		}
	}
}
