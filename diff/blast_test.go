package diff

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/rlctl/rlctl/internal/golden"
	"github.com/rlctl/rlctl/internal/policyfixture"
	"github.com/rlctl/rlctl/policy"
	"github.com/rlctl/rlctl/simulate"
	"github.com/rlctl/rlctl/simulate/accesslog"
	"github.com/rlctl/rlctl/simulate/report"
	"github.com/rlctl/rlctl/simulate/traffic"
)

// tenantModel has one rule per tenant, limit requests an hour, so that nothing refills.
func tenantModel(requests int64, stage policy.StageName) *policy.Model {
	return &policy.Model{Domains: []*policy.Domain{{
		Name:    "d",
		Sources: []*policy.Source{{Key: "tenant", Kind: policy.SourceHeader, Header: "x-tenant-id"}},
		Rules: []*policy.Rule{{Name: "per_tenant", Match: []policy.Match{{Key: "tenant", Kind: policy.MatchAny}},
			Limits: []policy.Limit{{Requests: requests, WindowMs: 3_600_000, Burst: requests, Algorithm: policy.TokenBucket, Cost: 1}},
			Stage:  policy.Stage{Name: stage},
			Lease:  policyfixture.Lease(policyfixture.Bounds(1, 1), policyfixture.UnsetWatermark())}},
	}}}
}

// records replays 20 requests of tenant t, then 20 of tenant u (legitimate), one a millisecond.
func records() []accesslog.Record {
	var recs []accesslog.Record
	for i := range 40 {
		tenant := "t"
		if i >= 20 {
			tenant = "u"
		}
		recs = append(recs, accesslog.Record{File: "a.log", Line: int64(i + 1), TimeMs: 1_000_000 + int64(i),
			RemoteAddr: "192.0.2.1", Headers: []accesslog.Header{{Name: "x-tenant-id", Value: tenant}}})
	}
	return recs
}

// replayRecords is a Replayer over recs with one gateway.
func replayRecords(recs []accesslog.Record, legit ...string) Replayer {
	return func(_ context.Context, m *policy.Model, obs simulate.Observer) (*report.Report, error) {
		s, err := simulate.New(simulate.Config{Model: m, Gateways: 1, Observer: obs, Legit: legit})
		if err != nil {
			return nil, err
		}
		for i := range recs {
			if err := s.Replay(&recs[i]); err != nil {
				return nil, err
			}
		}
		return s.Finish()
	}
}

// Each request is compared with itself: the limit 10 → 5 newly denies requests 6 to 10 of
// each tenant, and a rule rolled back to shadow newly admits what it denied.
func TestBlastRadius(t *testing.T) {
	tests := []struct {
		name                       string
		base, head                 *policy.Model
		denied, admitted           int64
		wouldDeny, noLongerWouldDy int64
	}{
		{"tightened", tenantModel(10, policy.StageEnforce), tenantModel(5, policy.StageEnforce), 10, 0, 10, 0},
		{"loosened", tenantModel(5, policy.StageEnforce), tenantModel(10, policy.StageEnforce), 0, 10, 0, 10},
		{"rolled back to shadow", tenantModel(10, policy.StageEnforce), tenantModel(10, policy.StageShadow), 0, 20, 0, 0},
		{"tightened in shadow", tenantModel(10, policy.StageShadow), tenantModel(5, policy.StageShadow), 0, 0, 10, 0},
		{"unchanged", tenantModel(10, policy.StageEnforce), tenantModel(10, policy.StageEnforce), 0, 0, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := BlastRadius(context.Background(), tt.base, tt.head, 0, replayRecords(records(), "u"))
			if err != nil {
				t.Fatal(err)
			}
			got := []int64{b.NewlyDenied, b.NewlyAdmitted, b.NewlyWouldDeny, b.NoLongerWouldDeny}
			want := []int64{tt.denied, tt.admitted, tt.wouldDeny, tt.noLongerWouldDy}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("newly denied, admitted, would deny, no longer: got %v, want %v", got, want)
			}
			if b.Requests != 40 {
				t.Errorf("requests: got %d, want 40", b.Requests)
			}
			for _, r := range b.Rules {
				if r.NewlyDenied+r.NewlyAdmitted+r.NewlyWouldDeny+r.NoLongerWouldDeny == 0 {
					t.Errorf("rule %s: got a row with nothing counted, want only rules with counts", r.Rule)
				}
			}
			if tt.name != "tightened" {
				return
			}
			if len(b.Rules) != 1 {
				t.Fatalf("rules: got %d, want 1", len(b.Rules))
			}
			r := b.Rules[0]
			if r.Rule != "per_tenant" || r.NewlyDenied != 10 || r.Stage != "enforce" {
				t.Errorf("rule: got %+v, want per_tenant (enforce) newly denying 10", r)
			}
			var ids []string
			for _, id := range r.Top {
				ids = append(ids, fmt.Sprintf("%s %d %q", id.Value, id.NewlyDenied, id.Note))
			}
			if got, want := strings.Join(ids, "; "), `tenant=t 5 ""; tenant=u 5 "5 denials of legitimate callers"`; got != want {
				t.Errorf("top identities: got %s, want %s", got, want)
			}
		})
	}
}

// A renamed rule's newly admitted requests are counted under its head name.
func TestBlastRadiusRenamed(t *testing.T) {
	base, head := tenantModel(10, policy.StageEnforce), tenantModel(20, policy.StageEnforce)
	head.Domains[0].Rules[0].Name = "tenants"
	b, err := BlastRadius(context.Background(), base, head, 0, replayRecords(records()))
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Rules) != 1 || b.Rules[0].Rule != "tenants" || b.Rules[0].NewlyAdmitted != 20 {
		t.Errorf("got %+v, want one rule, tenants, newly admitting 20", b.Rules)
	}
}

// On a generated log through the golden policies, request-by-request counts agree with the
// two replays' totals: what is newly denied less what is newly admitted is the change in
// requests denied. The three forms of it are golden.
func TestBlastRadiusGenerated(t *testing.T) {
	var log bytes.Buffer
	if err := traffic.Write(&log, traffic.Config{Seed: 7, Lines: 4000}); err != nil {
		t.Fatal(err)
	}
	base, head := load(t, "testdata/base"), load(t, "testdata/head")
	reports := map[*policy.Model]*report.Report{}
	replay := func(ctx context.Context, m *policy.Model, obs simulate.Observer) (*report.Report, error) {
		r, err := simulate.Run(ctx, simulate.RunConfig{Sim: simulate.Config{Model: m, Gateways: 4, Observer: obs, TopN: -1}},
			[]simulate.Input{{Name: "gen.jsonl", R: bytes.NewReader(log.Bytes())}})
		reports[m] = r
		return r, err
	}
	b, err := BlastRadius(context.Background(), base, head, 3, replay)
	if err != nil {
		t.Fatal(err)
	}
	rb, rh := reports[base].Totals, reports[head].Totals
	if got, want := b.NewlyDenied-b.NewlyAdmitted, rh.RequestsDenied-rb.RequestsDenied; got != want {
		t.Errorf("newly denied − newly admitted: got %d, want %d (head %d − base %d)", got, want, rh.RequestsDenied, rb.RequestsDenied)
	}
	if got, want := b.NewlyWouldDeny-b.NoLongerWouldDeny, rh.RequestsWouldDeny-rb.RequestsWouldDeny; got != want {
		t.Errorf("newly would deny − no longer: got %d, want %d", got, want)
	}
	if b.NewlyDenied == 0 {
		t.Error("got nothing newly denied, want shopify_payments's tightening to deny some requests")
	}
	var sum int64
	for _, r := range b.Rules {
		sum += r.NewlyDenied
		if len(r.Top) > 3 {
			t.Errorf("%s: got %d identities, want at most 3", r.Rule, len(r.Top))
		}
	}
	if sum < b.NewlyDenied {
		t.Errorf("rules' newly denied: got %d in all, want at least the %d requests", sum, b.NewlyDenied)
	}
	cs := Compare(base, head)
	var text, md, js bytes.Buffer
	if err := WriteText(&text, cs, WithBlast(b)); err != nil {
		t.Fatal(err)
	}
	if err := WriteJSON(&js, cs, WithBlast(b)); err != nil {
		t.Fatal(err)
	}
	if err := WriteMarkdown(&md, cs, WithBlast(b)); err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "testdata/golden/blast.txt", text.Bytes())
	golden.Check(t, "testdata/golden/blast.md", md.Bytes())
	golden.Check(t, "testdata/golden/blast.json", js.Bytes())
}
