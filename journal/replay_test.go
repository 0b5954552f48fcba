package journal

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/rlctl/rlctl/engine"
	"github.com/rlctl/rlctl/internal/policyfixture"
	"github.com/rlctl/rlctl/policy"
)

// replayModel has one rule, 2 per minute per user, whose leases of one token make every
// decision a synchronous store take: what a journal of it holds is easy to write by hand.
func replayModel() *policy.Model {
	return &policy.Model{Domains: []*policy.Domain{{Name: "edge", Rules: []*policy.Rule{{
		Name:   "r",
		Match:  []policy.Match{{Key: "user", Kind: policy.MatchAny}},
		Limits: []policy.Limit{{Requests: 2, WindowMs: 60_000, Burst: 2, Algorithm: policy.TokenBucket, Cost: 1}},
		Stage:  policy.Stage{Name: policy.StageEnforce}, FailureMode: policy.FailOpen,
		Lease: policyfixture.Lease(policyfixture.Bounds(1, 1), policyfixture.TTL(10_000), policyfixture.UnsetWatermark()),
	}}}}}
}

const replayKey = "rl:edge:r:user:u1"

// replayRecords is what an enforcer writes for five requests of user u1 and one unmatched
// descriptor: a grant, a denial by the store (another instance took the last token), two local
// short circuits while the key is held, and a grant once a batch has refilled.
func replayRecords(t *testing.T) []Record {
	t.Helper()
	ver, err := policy.ContentHash(replayModel())
	if err != nil {
		t.Fatal(err)
	}
	take := func(tm, got, rem, retry, reset int64) Record {
		return Record{Kind: KindStore, TimeMs: tm, LocalMs: tm, Op: OpTake, Key: replayKey, Want: 1, Min: 1, Got: got,
			Remaining: rem, RetryMs: retry, ResetMs: reset}
	}
	dec := func(tm int64, seq uint64, eng, via string, rem, reset int64) Record {
		code := eng
		return Record{Kind: KindDecision, TimeMs: tm, Seq: seq, Gen: 1, Domain: "edge", Rule: "r", Key: replayKey, Cost: 1,
			Engine: eng, Code: code, Via: via, Remaining: rem, ResetMs: reset}
	}
	return []Record{
		{Kind: KindConfig, TimeMs: 1000, Gen: 1, ConfigVersion: ver, Rules: 1},
		// A token is 30 s: the bucket is full again 30 s after the first take and 60 s once
		// the other instance took the second; the denial reports its retry-after, 30 s, which
		// is also when a batch of one token has refilled.
		take(1000, 1, 1, 0, 30_000),
		dec(1000, 1, CodeOK, ViaStore, 1, 30_000),
		take(1000, 0, 0, 30_000, 60_000),
		dec(1000, 2, CodeOver, ViaStore, 0, 30_000),
		dec(1000, 3, CodeOver, ViaShortCircuit, 0, 30_000),
		dec(1000, 4, CodeOver, ViaShortCircuit, 0, 30_000),
		{Kind: KindSweep, TimeMs: 2000, Stripe: engine.ShardOf(replayKey, 4)},
		take(31_000, 1, 0, 0, 60_000),
		dec(31_000, 5, CodeOK, ViaStore, 0, 60_000),
		{Kind: KindDecision, TimeMs: 31_000, Seq: 5, Index: 1, Gen: 1, Domain: "edge", Via: ViaUnmatched, Engine: CodeOK, Code: CodeOK},
		{Kind: KindEnd, TimeMs: 40_000},
	}
}

// journalOf writes records as a journal.
func journalOf(t *testing.T, h Header, recs []Record) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	w, err := NewWriter(&buf, h, Options{Policy: Block})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		w.Write(r)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return &buf
}

var replayHeader = Header{Instance: "pod-a", StartMs: 1000, Stripes: 4, UnavailableRetryMs: 1000}

func TestReplay(t *testing.T) {
	tests := []struct {
		name string
		edit func([]Record) []Record
		want []string // mismatch lines, in order, without the "journal:LINE: instance pod-a: " prefix
	}{
		{"exact", nil, nil},
		{"a field differs", func(rs []Record) []Record {
			rs[2].Remaining = 7
			return rs
		}, []string{"decision: key " + replayKey + ": rule r: recorded eng=ok code=ok via=store rem=7 reset=30000; replayed eng=ok code=ok via=store rem=1 reset=30000"}},
		// Without the take, the replay finds the store unavailable: the fail-open rule's key,
		// new to the replay, is capped by the rule's own limit of 2, one already spent.
		{"a take is missing", func(rs []Record) []Record {
			return append(rs[:3:3], rs[4:]...)
		}, []string{
			"store: key " + replayKey + ": the replay took 1 (at least 1) tokens synchronously; the journal has no such take",
			"decision: key " + replayKey + ": rule r: recorded eng=over code=over via=store rem=0 reset=30000; replayed eng=ok code=ok via=fail_open rem=1 reset=30000",
			"store: key " + replayKey + ": the replay took 1 (at least 1) tokens synchronously; the journal has no such take",
			"decision: key " + replayKey + ": rule r: recorded eng=over code=over via=short_circuit rem=0 reset=30000; replayed eng=ok code=ok via=fail_open rem=0 reset=60000",
			"store: key " + replayKey + ": the replay took 1 (at least 1) tokens synchronously; the journal has no such take",
			"decision: key " + replayKey + ": rule r: recorded eng=over code=over via=short_circuit rem=0 reset=30000; replayed eng=over code=over via=fail_open rem=0 reset=30000",
		}},
		// A denial the enforcer never got is replayed first, and the grant is left over.
		{"an extra take", func(rs []Record) []Record {
			return append(rs[:7:7], append([]Record{rs[3]}, rs[7:]...)...)
		}, []string{
			"decision: key " + replayKey + ": rule r: recorded eng=ok code=ok via=store rem=0 reset=60000; replayed eng=over code=over via=store rem=0 reset=30000",
			"store: key " + replayKey + ": rule r: the journal has a synchronous take at line 11 that the replayed decision did not make",
		}},
		{"tokens went back", func(rs []Record) []Record {
			ret := Record{Kind: KindStore, TimeMs: 3000, Op: OpReturn, Key: replayKey, Got: 4}
			return append(rs[:len(rs)-1:len(rs)-1], ret, rs[len(rs)-1])
		}, []string{"store: key " + replayKey + ": the journal gave back 4 tokens in all, the replay 0"}},
		{"dropped records", func(rs []Record) []Record {
			rs[len(rs)-1].Dropped = 3
			return rs
		}, []string{"journal: the enforcer dropped 3 records while writing this journal (rlctl-enforcer --journal-block keeps them)"}},
	}
	for _, tt := range tests {
		recs := replayRecords(t)
		if tt.edit != nil {
			recs = tt.edit(recs)
		}
		rep, err := Replay(context.Background(), []*policy.Model{replayModel()},
			[]Input{{Name: "j.jsonl", R: journalOf(t, replayHeader, recs)}})
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if rep.Decisions != 6 && tt.name == "exact" {
			t.Errorf("%s: decisions: got %d, want 6", tt.name, rep.Decisions)
		}
		var got []string
		for _, m := range rep.Mismatches {
			s := m.String()
			if i := strings.Index(s, "instance pod-a: "); i >= 0 {
				s = s[i+len("instance pod-a: "):]
			}
			got = append(got, s)
		}
		if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
			t.Errorf("%s: mismatches:\ngot  %q\nwant %q", tt.name, got, tt.want)
		}
	}
}

// TestReplayErrors: journals that cannot be replayed are errors that name the journal.
func TestReplayErrors(t *testing.T) {
	recs := replayRecords(t)
	other := replayModel()
	other.Domains[0].Rules[0].Limits[0].Requests = 3
	tests := []struct {
		name   string
		header Header
		models []*policy.Model
		want   string
	}{
		{"unordered", Header{Instance: "pod-a"}, []*policy.Model{replayModel()}, "j.jsonl: journal version 2 is not ordered"},
		{"unknown config", replayHeader, []*policy.Model{other}, "j.jsonl:2: config sha256:"},
	}
	for _, tt := range tests {
		_, err := Replay(context.Background(), tt.models, []Input{{Name: "j.jsonl", R: journalOf(t, tt.header, recs)}})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: got %v, want an error containing %q", tt.name, err, tt.want)
		}
	}
	// A config record the enforcer dropped: its decisions say the journal lost it.
	var noConfig []Record
	for _, r := range recs {
		if r.Kind != KindConfig {
			noConfig = append(noConfig, r)
		}
	}
	if _, err := Replay(context.Background(), []*policy.Model{replayModel()}, []Input{{Name: "j.jsonl", R: journalOf(t, replayHeader, noConfig)}}); err == nil ||
		!strings.Contains(err.Error(), "the journal lost that record") {
		t.Errorf("a dropped config record: got %v, want an error saying the journal lost it", err)
	}
	v1 := strings.NewReader(`{"journal":"rlctl","v":1,"start_ms":1}` + "\n")
	if _, err := Replay(context.Background(), nil, []Input{{Name: "old.jsonl", R: v1}}); err == nil || !strings.Contains(err.Error(), "version 1") {
		t.Errorf("version 1: got %v", err)
	}
}

func TestWriteReport(t *testing.T) {
	rep, err := Replay(context.Background(), []*policy.Model{replayModel()},
		[]Input{{Name: "j.jsonl", R: journalOf(t, replayHeader, replayRecords(t))}})
	if err != nil {
		t.Fatal(err)
	}
	var text, js bytes.Buffer
	if err := WriteReport(&text, rep, "text"); err != nil {
		t.Fatal(err)
	}
	want := "journal: decisions=6 mismatches=0\nj.jsonl: instance pod-a: 6 decisions, 0 mismatches, ended\n"
	if text.String() != want {
		t.Errorf("text: got %q, want %q", text.String(), want)
	}
	if err := WriteReport(&js, rep, "json"); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{`"schema": "rlctl.journal-replay/v1"`, `"decisions": 6`, `"mismatches": []`, `"ended": true`} {
		if !strings.Contains(js.String(), s) {
			t.Errorf("json: no %s in\n%s", s, js.String())
		}
	}
	if err := WriteReport(&js, rep, "xml"); err == nil {
		t.Error("xml: no error")
	}

	// One of each is counted in the singular.
	one := &Report{Decisions: 1, Journals: []Summary{{Name: "k.jsonl", Instance: "pod-b", Decisions: 1, Mismatches: 1, Ended: true}},
		Mismatches: []Mismatch{{Journal: "k.jsonl", Line: 2, Instance: "pod-b", What: "journal", Reason: "cut"}}}
	text.Reset()
	if err := WriteReport(&text, one, "text"); err != nil {
		t.Fatal(err)
	}
	if want := "k.jsonl: instance pod-b: 1 decision, 1 mismatch, ended\n"; !strings.Contains(text.String(), want) {
		t.Errorf("text: got %q, want a line %q", text.String(), want)
	}
}

// TestViaNames: the journal's via values are the engine's names.
func TestViaNames(t *testing.T) {
	for v, want := range map[engine.Via]string{engine.ViaLease: ViaLease, engine.ViaStore: ViaStore,
		engine.ViaShortCircuit: ViaShortCircuit, engine.ViaFallback: ViaFallback, engine.ViaFailOpen: ViaFailOpen,
		engine.ViaFailClosed: ViaFailClosed} {
		if v.String() != want {
			t.Errorf("engine.Via %d: %q, journal %q", v, v.String(), want)
		}
	}
}
