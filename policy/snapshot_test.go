package policy

import (
	"bytes"
	"errors"
	"math/rand"
	"reflect"
	"strings"
	"testing"
)

func TestSnapshotErrors(t *testing.T) {
	m := validModel()
	var b bytes.Buffer
	if err := WriteSnapshot(&b, m); err != nil {
		t.Fatal(err)
	}
	good := b.String()
	tests := []struct {
		name string
		in   string
		want error // nil: any error
	}{
		{"version", strings.Replace(good, `"schema_version": 1`, `"schema_version": 2`, 1), ErrSnapshotVersion},
		{"tampered", strings.Replace(good, `"name": "r"`, `"name": "s"`, 1), ErrSnapshotHash},
		{"unknown field", strings.Replace(good, `"schema_version": 1`, `"schema_version": 1, "extra": true`, 1), nil},
		{"not json", "{", nil},
		{"no model", `{"schema_version": 1, "content_hash": "x"}`, nil},
	}
	for _, tt := range tests {
		_, err := ReadSnapshot(strings.NewReader(tt.in))
		if err == nil || (tt.want != nil && !errors.Is(err, tt.want)) {
			t.Errorf("%s: got %v, want %v", tt.name, err, tt.want)
		}
		if err != nil && strings.Count(err.Error(), "snapshot") > 1 {
			t.Errorf("%s: %q says snapshot twice", tt.name, err)
		}
	}
	if _, err := ReadSnapshot(strings.NewReader(good)); err != nil {
		t.Errorf("good snapshot: %v", err)
	}
}

// TestSnapshotInvalidModel: a snapshot whose hash matches but whose model no consumer could use
// is refused with the problems, each naming the value.
func TestSnapshotInvalidModel(t *testing.T) {
	tests := []struct {
		name string
		edit func(m *Model)
		want string // "" for a snapshot ReadSnapshot accepts
	}{
		{"valid", func(m *Model) {}, ""},
		{"zero window", func(m *Model) { m.Domains[0].Rules[0].Limits[0].WindowMs = 0 },
			"domains.d.rules.r.limits.0.window: window 0ms is out of range"},
		{"duplicate match", func(m *Model) {
			r := *m.Domains[0].Rules[0]
			r.Name = "r2"
			m.Domains[0].Rules = append(m.Domains[0].Rules, &r)
		}, "rule r2 has the same match as rule r"},
		{"unknown algorithm", func(m *Model) { m.Domains[0].Rules[0].Limits[0].Algorithm = "leaky" }, `unknown algorithm "leaky"`},
		{"unknown stage", func(m *Model) { m.Domains[0].Rules[0].Stage.Name = "dark" }, `unknown stage "dark"`},
		{"unknown failure mode", func(m *Model) { m.Domains[0].Rules[0].FailureMode = "ajar" }, `unknown failure mode "ajar"`},
		{"bad shard count", func(m *Model) {
			m.Domains[0].Rules[0].SubShards = &SubShards{Count: 1, Attribute: "k"}
		}, "sub_shards count 1 is out of range"},
		// Each shard admits at least one: 64 shards of a 10-request limit admitted 64.
		{"fewer requests than shards", func(m *Model) {
			m.Domains[0].Rules[0].Limits[0].Requests = 10
			m.Domains[0].Rules[0].SubShards = &SubShards{Count: 64, Attribute: "k"}
		}, "requests 10 is fewer than the 64 sub_shards: each shard admits at least 1, so the rule would admit 64"},
		{"lease bounds", func(m *Model) { m.Domains[0].Rules[0].Lease.Min = 9 }, "lease min 9 is above lease max 5"},
		{"negative dwell", func(m *Model) { m.Domains[0].Governance.SoftDwellMs = -1 },
			"domains.d.governance.dwell: governance dwell shadow 0ms and soft -1ms must not be negative"},
		{"canary_percent over 100", func(m *Model) { m.Domains[0].Rollout.CanaryPercent = 101 },
			"domains.d.rollout.canary_percent: rollout canary_percent 101 is out of range"},
		{"threshold over 100%", func(m *Model) {
			bp := int64(10001)
			m.Domains[0].Rollout.Prometheus.MaxShareBP = &bp
		}, "domains.d.rollout.gates.prometheus: rollout gate prometheus threshold 10001 basis points is out of range"},
		{"negative window", func(m *Model) { m.Domains[0].Rollout.Prometheus.WindowMs = -1 },
			"domains.d.rollout.gates.prometheus.window: rollout gate prometheus window -1ms must not be negative"},
		{"simulate window", func(m *Model) { m.Domains[0].Rollout.Simulate.WindowMs = 60000 },
			"rollout gate simulate has no window"},
		// JSON's null where a domain, a source or a rule goes is a problem, not a crash.
		{"null domain", func(m *Model) { m.Domains = append(m.Domains, nil) }, "domain 1 is null"},
		{"null rule", func(m *Model) { m.Domains[0].Rules = append(m.Domains[0].Rules, nil) }, "rule 1 is null"},
		{"null source", func(m *Model) { m.Domains[0].Sources = append(m.Domains[0].Sources, nil) }, "source 2 is null"},
		// Checks about how a policy is written are let through: the enforcer reads no sources,
		// and a canary at 0% is soft everywhere.
		{"key without a source", func(m *Model) { m.Domains[0].Sources = nil }, ""},
		{"canary at 0%", func(m *Model) { m.Domains[0].Rules[0].Stage = Stage{Name: StageCanary} }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := validModel()
			tt.edit(m)
			var b bytes.Buffer
			if err := WriteSnapshot(&b, m); err != nil {
				t.Fatal(err)
			}
			_, err := ReadSnapshot(&b)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("got %v, want no error", err)
				}
				return
			}
			var probs Problems
			if !errors.Is(err, ErrSnapshotModel) || !errors.As(err, &probs) {
				t.Fatalf("got %v, want ErrSnapshotModel with Problems", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

// TestSnapshotRandomRoundTrip writes and reads random models: nothing may be lost.
func TestSnapshotRandomRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for i := 0; i < 200; i++ {
		m := randomModel(rng)
		var b bytes.Buffer
		if err := WriteSnapshot(&b, m); err != nil {
			t.Fatal(err)
		}
		// Random models are not valid ones; this tests the encoding, so it skips Validate.
		got, err := decodeSnapshot(&b)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if !reflect.DeepEqual(got, m) {
			t.Fatalf("step %d: round trip changed the model", i)
		}
	}
}

func randomModel(rng *rand.Rand) *Model {
	str := func() string {
		const chars = "abcxyz/*:-_.é\"\\\x00"
		n := rng.Intn(6)
		var b strings.Builder
		for i := 0; i < n; i++ {
			b.WriteString(string([]rune(chars)[rng.Intn(len([]rune(chars)))]))
		}
		return b.String()
	}
	i64 := func() int64 { return rng.Int63n(1 << 53) }
	pos := func() Pos { return Pos{File: str(), Line: rng.Intn(1000), Col: rng.Intn(100)} }
	strs := func() []string {
		var ss []string
		for i := rng.Intn(3); i > 0; i-- {
			ss = append(ss, str())
		}
		return ss
	}
	m := &Model{}
	for i := rng.Intn(3); i > 0; i-- {
		d := &Domain{Name: str(), Pos: pos(), Gateway: Gateway{i64(), i64()}, CriticalPaths: strs(),
			Governance: Governance{i64(), i64(), rng.Intn(2) == 0, str(), nil, pos()}}
		if rng.Intn(2) == 0 {
			gate := func() GateSettings {
				g := GateSettings{WindowMs: i64(), Required: rng.Intn(2) == 0}
				if rng.Intn(2) == 0 {
					bp := i64()
					g.MaxShareBP = &bp
				}
				return g
			}
			d.Rollout = RolloutSettings{CanaryPercent: rng.Intn(101), Simulate: gate(), Prometheus: gate()}
		}
		for k := rng.Intn(3); k > 0; k-- {
			if d.Governance.Removed == nil {
				d.Governance.Removed = map[string]string{}
			}
			d.Governance.Removed[str()] = str()
		}
		for j := rng.Intn(3); j > 0; j-- {
			s := &Source{Key: str(), Kind: SourceKind(str()), Pos: pos(), Header: str(), Claim: str(),
				MetadataNamespace: str(), MetadataKey: str(), Mask: Mask(str()), Value: str(),
				PathExact: str(), PathPrefix: str()}
			for k := rng.Intn(3); k > 0; k-- {
				s.Waterfall = append(s.Waterfall, IdentityStep{IdentityTier(str()), str(), str()})
			}
			d.Sources = append(d.Sources, s)
		}
		for j := rng.Intn(4); j > 0; j-- {
			r := &Rule{Name: str(), Pos: pos(), Stage: Stage{StageName(str()), rng.Intn(101), str(), str(), pos()}, Reason: str(),
				FailureMode: FailureMode(str()), FailureReason: str(), StoreTimeoutMs: i64(),
				Lease: Lease{i64(), i64(), i64(), i64(), i64(), i64()}, Owner: str(),
				ExpectedPeakQPS: i64(), Gateways: i64(), DriftToleranceBP: i64(), Legit: strs()}
			for k := 1 + rng.Intn(3); k > 0; k-- {
				r.Match = append(r.Match, Match{str(), str(), MatchKind(str()), pos()})
			}
			for k := 1 + rng.Intn(2); k > 0; k-- {
				r.Limits = append(r.Limits, Limit{i64(), i64(), i64(), Algorithm(str()), i64(), pos()})
			}
			if rng.Intn(2) == 0 {
				r.Fallback = &Rate{i64(), i64()}
			}
			if rng.Intn(2) == 0 {
				r.SubShards = &SubShards{rng.Intn(1024), str()}
			}
			for k := rng.Intn(3); k > 0; k-- {
				r.Regions = append(r.Regions, RegionShare{str(), rng.Intn(101)})
			}
			d.Rules = append(d.Rules, r)
		}
		m.Domains = append(m.Domains, d)
	}
	return m
}

// TestContentHashIgnoresPositions: the hash names a policy's meaning, so moving a rule within its
// file, or naming the directory differently on the command line, keeps it.
func TestContentHashIgnoresPositions(t *testing.T) {
	a := &Model{Domains: []*Domain{{Name: "d", Pos: Pos{File: "policies/a.cue", Line: 1, Col: 1},
		Rules: []*Rule{{Name: "r", Pos: Pos{File: "policies/a.cue", Line: 3, Col: 2}}}}}}
	b := &Model{Domains: []*Domain{{Name: "d", Pos: Pos{File: "/abs/policies/a.cue", Line: 9, Col: 1},
		Rules: []*Rule{{Name: "r", Pos: Pos{File: "/abs/policies/a.cue", Line: 30, Col: 4}}}}}}
	ha, err := ContentHash(a)
	if err != nil {
		t.Fatal(err)
	}
	hb, err := ContentHash(b)
	if err != nil {
		t.Fatal(err)
	}
	if ha != hb {
		t.Errorf("hash with other positions: got %s, want %s", hb, ha)
	}
	b.Domains[0].Rules[0].Owner = "someone"
	if hc, _ := ContentHash(b); hc == ha {
		t.Errorf("hash after a change of owner: got %s, want a different hash", hc)
	}
}

// TestSnapshotWithoutGovernance: a model without governance (as a snapshot written before it
// existed holds) writes no governance field, so its content_hash is what it was.
func TestSnapshotWithoutGovernance(t *testing.T) {
	var b bytes.Buffer
	if err := WriteSnapshot(&b, validModel()); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "governance") {
		t.Errorf("got snapshot\n%s\nwant no governance field", b.String())
	}
	m := validModel()
	m.Domains[0].Governance = Governance{ShadowDwellMs: 1, NewRulesAtShadow: true}
	b.Reset()
	if err := WriteSnapshot(&b, m); err != nil {
		t.Fatal(err)
	}
	got, err := ReadSnapshot(&b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Domains[0].Governance, m.Domains[0].Governance) {
		t.Errorf("got governance %+v, want %+v", got.Domains[0].Governance, m.Domains[0].Governance)
	}
}

// TestSnapshotWithoutRollout: a domain without rollout settings writes no rollout field, so its
// content_hash is what it was before the field existed; settings that are there round-trip,
// a threshold of 0 included.
func TestSnapshotWithoutRollout(t *testing.T) {
	var b bytes.Buffer
	if err := WriteSnapshot(&b, validModel()); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "rollout") {
		t.Errorf("got snapshot\n%s\nwant no rollout field", b.String())
	}
	m := validModel()
	zero := int64(0)
	m.Domains[0].Rollout = RolloutSettings{CanaryPercent: 10, Prometheus: GateSettings{MaxShareBP: &zero, WindowMs: 60000}}
	b.Reset()
	if err := WriteSnapshot(&b, m); err != nil {
		t.Fatal(err)
	}
	got, err := ReadSnapshot(&b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Domains[0].Rollout, m.Domains[0].Rollout) {
		t.Errorf("got rollout %+v, want %+v", got.Domains[0].Rollout, m.Domains[0].Rollout)
	}
}
