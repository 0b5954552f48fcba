package simulate

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rlctl/rlctl/internal/policyfixture"
	"github.com/rlctl/rlctl/policy"
	"github.com/rlctl/rlctl/simulate/accesslog"
	"github.com/rlctl/rlctl/simulate/report"
	"github.com/rlctl/rlctl/simulate/traffic"
)

// testModel is a small hand-built model: a per-tenant rule, a per-address rule and a sharded
// rule, each with 1 hour windows so that nothing refills during a test.
func testModel() *policy.Model {
	hour := int64(3_600_000)
	rule := func(name string, match []policy.Match, requests int64) *policy.Rule {
		return &policy.Rule{Name: name, Match: match, Stage: policy.Stage{Name: policy.StageEnforce},
			Limits: []policy.Limit{{Requests: requests, WindowMs: hour, Algorithm: policy.TokenBucket, Cost: 1}},
			Lease:  policyfixture.Lease(policyfixture.Bounds(1, 5))}
	}
	sharded := rule("sharded", []policy.Match{{Key: "tenant", Value: "big", Kind: policy.MatchExact}}, 1600)
	sharded.SubShards = &policy.SubShards{Count: 16, Attribute: "ip"}
	perTenant := rule("per-tenant", []policy.Match{{Key: "tenant", Kind: policy.MatchAny}}, 10)
	perTenant.Legit = []string{"acme"}
	return &policy.Model{Domains: []*policy.Domain{{
		Name: "d",
		Sources: []*policy.Source{
			{Key: "tenant", Kind: policy.SourceHeader, Header: "x-tenant-id"},
			{Key: "ip", Kind: policy.SourceRemoteAddress, Mask: policy.MaskNone},
		},
		Rules: []*policy.Rule{
			sharded,
			perTenant,
			rule("per-ip", []policy.Match{{Key: "ip", Kind: policy.MatchAny}}, 5),
		},
	}}}
}

func replay(t *testing.T, cfg Config, recs []accesslog.Record) *report.Report {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i := range recs {
		if err := s.Replay(&recs[i]); err != nil {
			t.Fatal(err)
		}
	}
	r, err := s.Finish()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func ruleOf(t *testing.T, r *report.Report, name string) *report.Rule {
	t.Helper()
	for _, rl := range r.Rules {
		if rl.Rule == name {
			return rl
		}
	}
	t.Fatalf("no rule %s in report", name)
	return nil
}

func bearerFor(sub string) string {
	return "Bearer eyJhbGciOiJub25lIn0." + b64(fmt.Sprintf(`{"sub":%q}`, sub)) + ".sig"
}

// TestLeasingNeverOverAdmits replays 100 requests of one tenant over 4 gateways: leasing may
// strand tokens, but the fleet never admits more than the bucket holds.
func TestLeasingNeverOverAdmits(t *testing.T) {
	for _, gateways := range []int{1, 4, 16} {
		var recs []accesslog.Record
		for i := 0; i < 100; i++ {
			recs = append(recs, accesslog.Record{TimeMs: 1_000_000 + int64(i*10), Headers: []accesslog.Header{{Name: "x-tenant-id", Value: "t"}}})
		}
		lat, _ := ParseLatency("2ms", 1)
		r := replay(t, Config{Model: testModel(), Gateways: gateways, Latency: lat}, recs)
		rl := ruleOf(t, r, "per-tenant")
		if got, want := rl.Requests, int64(100); got != want {
			t.Errorf("gateways %d: requests: got %d, want %d", gateways, got, want)
		}
		if admitted := rl.Requests - rl.WouldDeny; admitted > 10 {
			t.Errorf("gateways %d: admitted: got %d, want at most 10", gateways, admitted)
		}
		if got, want := rl.IdealDeny, int64(90); got != want {
			t.Errorf("gateways %d: ideal deny: got %d, want %d", gateways, got, want)
		}
		if rl.StrandedMax > int64(gateways)*5 {
			t.Errorf("gateways %d: stranded max %d above N×B = %d", gateways, rl.StrandedMax, gateways*5)
		}
	}
}

// TestFalsePositives checks both kinds: a legitimate tenant denied, and an address shared by
// many users denied.
func TestFalsePositives(t *testing.T) {
	tests := []struct {
		name                string
		users               int
		tenant              string
		wantLegit, wantNAT  int64
		wantPerIPWouldDeny  int64
		wantTenantWouldDeny int64
	}{
		{"office behind NAT", 30, "", 0, 25, 25, 0},
		{"few users", 10, "", 0, 0, 25, 0},
		// Every request of a legitimate caller counts as legit, the per-ip denials too.
		{"legit tenant", 1, "acme", 45, 0, 25, 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var recs []accesslog.Record
			for i := 0; i < 30; i++ {
				rec := accesslog.Record{TimeMs: 5_000_000 + int64(i), RemoteAddr: "198.51.100.23:4000",
					Headers: []accesslog.Header{{Name: "authorization", Value: bearerFor(fmt.Sprintf("u%d", i%tt.users))}}}
				if tt.tenant != "" {
					rec.Headers = append(rec.Headers, accesslog.Header{Name: "x-tenant-id", Value: tt.tenant})
				}
				recs = append(recs, rec)
			}
			r := replay(t, Config{Model: testModel(), Gateways: 1, NATUsers: 20}, recs)
			if got := ruleOf(t, r, "per-ip").WouldDeny; got != tt.wantPerIPWouldDeny {
				t.Errorf("per-ip would deny: got %d, want %d", got, tt.wantPerIPWouldDeny)
			}
			if got := ruleOf(t, r, "per-tenant").WouldDeny; got != tt.wantTenantWouldDeny {
				t.Errorf("per-tenant would deny: got %d, want %d", got, tt.wantTenantWouldDeny)
			}
			if got := r.Totals.LegitDenials; got != tt.wantLegit {
				t.Errorf("legit denials: got %d, want %d", got, tt.wantLegit)
			}
			if got := r.Totals.NATCollateral; got != tt.wantNAT {
				t.Errorf("NAT collateral: got %d, want %d", got, tt.wantNAT)
			}
			if got, want := r.Totals.FalsePositives, tt.wantLegit+tt.wantNAT; got != want {
				t.Errorf("false positives: got %d, want %d", got, want)
			}
			if got := r.Totals.RequestsWithUser; got != 30 {
				t.Errorf("requests with a user: got %d, want 30", got)
			}
		})
	}
}

func TestMatcherSharded(t *testing.T) {
	m, err := NewMatcher(testModel().Domains[0])
	if err != nil {
		t.Fatal(err)
	}
	got := m.Match(policy.Request{Headers: map[string]string{"x-tenant-id": "big"}, RemoteAddr: "192.0.2.1"})
	var names []string
	for _, mt := range got {
		names = append(names, mt.Rule.Name)
		if mt.Rule.Name == "sharded" {
			if !strings.Contains(mt.Key, ":shard:") {
				t.Errorf("sharded key %q has no shard", mt.Key)
			}
			if got, want := mt.Limits[0].Requests, int64(100); got != want {
				t.Errorf("shard requests: got %d, want %d", got, want)
			}
		}
	}
	// tenant=big selects the sharded rule's exact branch; matching never backtracks to the
	// per-tenant key-only branch (envoyproxy/ratelimit semantics).
	if want := "sharded,per-ip"; strings.Join(names, ",") != want {
		t.Errorf("matched: got %s, want %s", strings.Join(names, ","), want)
	}
}

func TestDecodeClaims(t *testing.T) {
	tests := []struct {
		auth string
		want map[string]string
	}{
		{"Bearer " + "x." + b64(`{"sub":"u1","n":3,"ok":true,"o":{"a":1}}`) + ".s", map[string]string{"sub": "u1", "n": "3", "ok": "true"}},
		{"bearer x." + b64(`{"sub":"u2"}`) + "==.s", map[string]string{"sub": "u2"}},
		{"Basic dXNlcjpwYXNz", nil},
		{"Bearer a.!!!.c", nil},
		{"Bearer a." + b64(`[1]`) + ".c", nil},
	}
	for _, tt := range tests {
		got := decodeClaims(tt.auth)
		if fmt.Sprint(got) != fmt.Sprint(tt.want) {
			t.Errorf("decodeClaims(%q): got %v, want %v", tt.auth, got, tt.want)
		}
	}
}

func TestParsers(t *testing.T) {
	for _, s := range []string{"0", "1ms", "500us", "uniform:0.5ms-2ms", "1001us"} {
		if _, err := ParseLatency(s, 1); err != nil {
			t.Errorf("ParseLatency(%q): %v", s, err)
		}
	}
	// Each error names the flag, and what is wrong with the value.
	for s, want := range map[string]string{
		"fast":              `--store-latency "fast": want a duration such as 1ms, or uniform:LO-HI`,
		"-1ms":              `"-1ms": -1ms is below 0`,
		"uniform:-1ms-2ms":  "LO is empty (LO and HI are 0 or more)",
		"uniform:2ms-1ms":   "HI is below LO",
		"uniform:1ms":       "want uniform:LO-HI",
		"uniform:1x-2ms":    "want LO: a duration",
		"uniform:1ms-2":     "want HI: a duration",
		"100ns":             "100ns is not a whole number of microseconds",
		"uniform:1.5us-2ms": "LO 1.5us is not a whole number of microseconds",
	} {
		_, err := ParseLatency(s, 1)
		if err == nil || !strings.HasPrefix(err.Error(), "--store-latency ") || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseLatency(%q): got %v, want an error with %q", s, err, want)
		}
	}
	l, _ := ParseLatency("uniform:1ms-2ms", 1)
	l = l.forShard(0)
	for i := 0; i < 1000; i++ {
		if d := l.draw(); d < 1000 || d > 2000 {
			t.Fatalf("draw: got %dµs, want in [1000, 2000]", d)
		}
	}
	for s, want := range map[string]string{"": "round-robin", "hash:x_forwarded_for": "hash:x_forwarded_for", "field:hostname": "field:hostname",
		"field:X-Tenant-Id": "field:x-tenant-id", "hash:Start_Time": "hash:start_time"} {
		a, err := ParseAssignment(s)
		if err != nil || a.String() != want {
			t.Errorf("ParseAssignment(%q): got %v, %v; want %s", s, a, err, want)
		}
	}
	if _, err := ParseAssignment("hash:"); err == nil || !strings.HasPrefix(err.Error(), `--assign "hash:"`) {
		t.Errorf("ParseAssignment(hash:): got %v, want an error naming --assign", err)
	}
}

func TestThresholds(t *testing.T) {
	r := &report.Report{Requests: 1000, BadLines: 2, Totals: report.Totals{FalsePositiveRate: 0.01, WouldDeny: 50}}
	tests := []struct {
		expr    string
		crossed bool
	}{
		{"false_positive_rate>0.5%", true},
		{"false_positive_rate > 2%", false},
		{"would_deny>=50", true},
		{"would_deny<50", false},
		{"bad_lines==2", true},
		{"bad_lines!=2", false},
	}
	for _, tt := range tests {
		th, err := ParseThreshold(tt.expr)
		if err != nil {
			t.Fatalf("ParseThreshold(%q): %v", tt.expr, err)
		}
		r.Failed = false
		Evaluate(r, []Threshold{th})
		if got := r.Thresholds[0].Crossed; got != tt.crossed || r.Failed != tt.crossed {
			t.Errorf("%s: got crossed %v (failed %v), want %v", tt.expr, got, r.Failed, tt.crossed)
		}
	}
	// A percentage is exact where its rate is: of 100 requests 35 denied is a deny rate of
	// 0.35, at which >=35% is crossed and <35% is not, as with the fraction written out.
	exact := &report.Report{Requests: 100, Totals: report.Totals{DenyRate: 0.35}}
	for _, tt := range []struct {
		expr    string
		crossed bool
	}{{"deny_rate>=35%", true}, {"deny_rate<35%", false}, {"deny_rate>=0.35", true}, {"deny_rate<=35%", true}} {
		th, err := ParseThreshold(tt.expr)
		if err != nil {
			t.Fatalf("ParseThreshold(%q): %v", tt.expr, err)
		}
		exact.Failed = false
		Evaluate(exact, []Threshold{th})
		if got := exact.Thresholds[0].Crossed; got != tt.crossed {
			t.Errorf("%s at a deny rate of 35/100: got crossed %v, want %v", tt.expr, got, tt.crossed)
		}
	}
	for p := 1; p < 100; p++ {
		th, err := ParseThreshold(fmt.Sprintf("deny_rate>=%d%%", p))
		if err != nil {
			t.Fatal(err)
		}
		if want := float64(p) / 100; th.Value != want {
			t.Errorf("deny_rate>=%d%%: value %v, want %v", p, th.Value, want)
		}
	}
	for _, bad := range []string{"nonsense", "happiness>1", "would_deny>lots", "denied>NaN", "deny_rate<Inf%", "would_deny>-inf"} {
		if _, err := ParseThreshold(bad); err == nil || !strings.HasPrefix(err.Error(), "--fail-if ") {
			t.Errorf("ParseThreshold(%q): got %v, want an error naming --fail-if", bad, err)
		}
	}
	// A rate is a share: deny_rate>20 (meant as 20%) could never be crossed. Only a number that
	// makes a share as a percentage is suggested as one.
	for _, tt := range []struct{ expr, want string }{
		{"deny_rate>20", `--fail-if "deny_rate>20": deny_rate is a share from 0 to 1: write deny_rate>20% for a percentage`},
		{"deny_rate>-5%", `--fail-if "deny_rate>-5%": deny_rate is a share from 0% to 100%: -5% is outside it`},
		{"deny_rate<150%", `--fail-if "deny_rate<150%": deny_rate is a share from 0% to 100%: 150% is outside it`},
		{"deny_rate>-0.05", `--fail-if "deny_rate>-0.05": deny_rate is a share from 0 to 1 (0% to 100%): -0.05 is outside it`},
		{"false_positive_rate>500", `--fail-if "false_positive_rate>500": false_positive_rate is a share from 0 to 1 (0% to 100%): 500 is outside it`},
	} {
		if _, err := ParseThreshold(tt.expr); fmt.Sprint(err) != tt.want {
			t.Errorf("ParseThreshold(%q): got %v, want %s", tt.expr, err, tt.want)
		}
	}
	// A count is not a share: denied>5% read as denied>0.05, crossed by one denial.
	for _, bad := range []string{"denied>5%", "bad_lines>1%"} {
		if _, err := ParseThreshold(bad); err == nil || !strings.Contains(err.Error(), "is a count, not a share: drop the %, or test a rate (deny_rate, false_positive_rate, over_admission_rate)") {
			t.Errorf("ParseThreshold(%q): got %v, want a count is not a share", bad, err)
		}
	}
	for _, ok := range []string{"deny_rate>0.2", "false_positive_rate<=100%", "would_deny>20"} {
		if _, err := ParseThreshold(ok); err != nil {
			t.Errorf("ParseThreshold(%q): %v", ok, err)
		}
	}
	// The value is quoted as written, its % too.
	if _, err := ParseThreshold("deny_rate>abc%"); err == nil || !strings.Contains(err.Error(), `value "abc%" is not`) {
		t.Errorf(`ParseThreshold("deny_rate>abc%%"): got %v, want the value quoted as written`, err)
	}
}

// TestRunBadLines checks the bad-line budget of Run.
func TestRunBadLines(t *testing.T) {
	log := `{"start_time":"2024-05-01T12:00:00.000Z","path":"/a"}` + "\nnot json\n" +
		`{"start_time":"2024-05-01T12:00:00.001Z","path":"/b"}` + "\n{\n"
	for _, tt := range []struct {
		maxBad  int64
		wantErr bool
	}{{-1, false}, {2, false}, {1, true}} {
		r, err := Run(context.Background(), RunConfig{Sim: Config{Model: testModel()}, MaxBad: tt.maxBad},
			[]Input{{Name: "x.log", R: strings.NewReader(log)}})
		if (err != nil) != tt.wantErr {
			t.Fatalf("max-bad %d: got error %v, want error %v", tt.maxBad, err, tt.wantErr)
		}
		if err != nil {
			continue
		}
		if r.Requests != 2 || r.BadLines != 2 || r.BadLineSamples[0].Line != 2 || r.BadLineSamples[1].Line != 4 {
			t.Errorf("max-bad %d: got requests %d, bad %d %+v; want 2, 2 at lines 2 and 4", tt.maxBad, r.Requests, r.BadLines, r.BadLineSamples)
		}
	}
}

// Request totals count requests, not the rules' decisions: 30 requests of one tenant from one
// address, of which per-ip denies the last 25 and per-tenant the last 20, are 45 would-deny
// decisions but 25 requests, a deny rate of 25/30.
func TestRequestTotals(t *testing.T) {
	var recs []accesslog.Record
	for i := 0; i < 30; i++ {
		recs = append(recs, accesslog.Record{TimeMs: 5_000_000 + int64(i), RemoteAddr: "198.51.100.23:4000",
			Headers: []accesslog.Header{{Name: "x-tenant-id", Value: "acme"}}})
	}
	r := replay(t, Config{Model: testModel(), Gateways: 1}, recs)
	tot := r.Totals
	if tot.WouldDeny != 45 || tot.RequestsWouldDeny != 25 || tot.RequestsDenied != 25 {
		t.Errorf("would deny %d decisions, %d requests, %d rejected; want 45, 25, 25",
			tot.WouldDeny, tot.RequestsWouldDeny, tot.RequestsDenied)
	}
	if tot.RequestsWithUser != 0 {
		t.Errorf("requests with a user: got %d, want 0 (no JWT, no fingerprint)", tot.RequestsWithUser)
	}
	if want := 25.0 / 30; tot.DenyRate != want {
		t.Errorf("deny rate: got %v, want %v", tot.DenyRate, want)
	}
}

// Records without the field of a hash or field assignment are counted, so that a misspelt
// --assign field does not silently put the whole fleet's traffic on one gateway.
func TestAssignMissing(t *testing.T) {
	for _, assign := range []string{"hash:x-node", "field:x-node", "round-robin"} {
		a, err := ParseAssignment(assign)
		if err != nil {
			t.Fatal(err)
		}
		recs := []accesslog.Record{
			{TimeMs: 1000, Headers: []accesslog.Header{{Name: "x-node", Value: "n1"}}},
			{TimeMs: 1001},
			{TimeMs: 1002, Headers: []accesslog.Header{{Name: "x-node", Value: ""}}},
		}
		want := int64(2)
		if a.Kind == "round-robin" {
			want = 0
		}
		r := replay(t, Config{Model: testModel(), Gateways: 4, Assign: a}, recs)
		if r.AssignMissing != want {
			t.Errorf("%s: assign_missing %d, want %d", assign, r.AssignMissing, want)
		}
	}
}

// Legit entries, of --legit and of a rule's legit list alike, may be written as reports show
// identities, KEY=VALUE with KEY a descriptor key; a KEY that is none stays a literal value.
// Each case runs with the value alone, which legitSet compares one by one, and among more than
// maxLegitFew others of its length, which it looks up in the map.
func TestLegitKeyValue(t *testing.T) {
	var recs []accesslog.Record
	for i := 0; i < 12; i++ { // per-tenant allows 10
		recs = append(recs, accesslog.Record{TimeMs: 5_000_000 + int64(i), RemoteAddr: fmt.Sprintf("192.0.2.%d:1", i),
			Headers: []accesslog.Header{{Name: "x-tenant-id", Value: "beta"}}})
	}
	for _, tt := range []struct {
		legit string
		want  int64
	}{{"beta", 2}, {"tenant=beta", 2}, {"nokey=beta", 0}, {"tenant=other", 0}} {
		many := []string{tt.legit}
		for i := 0; len(many) <= maxLegitFew; i++ {
			many = append(many, fmt.Sprintf("x%0*d", len(tt.legit)-1, i), fmt.Sprintf("y%0*d", len("beta")-1, i))
		}
		for _, legit := range [][]string{{tt.legit}, many} {
			r := replay(t, Config{Model: testModel(), Gateways: 1, Legit: legit}, recs)
			if got := r.Totals.LegitDenials; got != tt.want {
				t.Errorf("--legit %s among %d: legit denials %d, want %d", tt.legit, len(legit), got, tt.want)
			}
			m := testModel()
			ruleIn(t, m, "per-tenant").Legit = legit
			r = replay(t, Config{Model: m, Gateways: 1}, recs)
			if got := r.Totals.LegitDenials; got != tt.want {
				t.Errorf("rule legit [%s] among %d: legit denials %d, want %d", tt.legit, len(legit), got, tt.want)
			}
		}
	}
}

// ruleIn returns the rule of m named name.
func ruleIn(t *testing.T, m *policy.Model, name string) *policy.Rule {
	t.Helper()
	for _, d := range m.Domains {
		for _, r := range d.Rules {
			if r.Name == name {
				return r
			}
		}
	}
	t.Fatalf("no rule %s", name)
	return nil
}

// Store replies still in flight when the log ends land after it, in Finish; they count in the
// last bucket, so every series ends with the log.
func TestSeriesEndWithLog(t *testing.T) {
	m := examplePolicies(t)
	var log bytes.Buffer
	if err := traffic.Write(&log, traffic.Config{Seed: 1, Lines: 5000}); err != nil {
		t.Fatal(err)
	}
	lat, err := ParseLatency("uniform:1ms-3s", 1)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Run(context.Background(), RunConfig{Sim: Config{Model: m, Gateways: 4, Latency: lat}, MaxBad: -1},
		[]Input{{Name: "gen.log", R: &log}})
	if err != nil {
		t.Fatal(err)
	}
	want := int((r.EndMs-r.StartMs)/r.Settings.BucketMs) + 1
	for _, rl := range r.Rules {
		s := rl.Series
		if len(s.Requests) != want || len(s.WouldDeny) != want || len(s.IdealDeny) != want || len(s.Lease) != want {
			t.Errorf("%s: series lengths requests %d, would-deny %d, ideal %d, lease %d; want %d each",
				rl.Rule, len(s.Requests), len(s.WouldDeny), len(s.IdealDeny), len(s.Lease), want)
		}
	}
}

// A record logged before an earlier one is replayed at the later time, counted, and the first
// such is named: one record from far in the future makes every later one late.
func TestReordered(t *testing.T) {
	recs := []accesslog.Record{
		{File: "x.log", Line: 1, TimeMs: 1_000},
		{File: "x.log", Line: 2, TimeMs: 9_000},
		{File: "x.log", Line: 3, TimeMs: 2_000},
		{File: "x.log", Line: 4, TimeMs: 3_000},
	}
	r := replay(t, Config{Model: testModel()}, recs)
	if r.Reordered != 2 || r.FirstReordered != "x.log:3" {
		t.Errorf("reordered %d, first %q; want 2, x.log:3", r.Reordered, r.FirstReordered)
	}
}

// A field assignment whose field takes a value per request (a request ID) is refused once it
// would make more than MaxGateways gateways, instead of growing a gateway per request.
func TestAssignFieldBound(t *testing.T) {
	a, err := ParseAssignment("field:x-request-id")
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Model: testModel(), Assign: a})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i <= MaxGateways; i++ {
		rec := accesslog.Record{File: "r.log", Line: int64(i + 1), TimeMs: 1000 + int64(i),
			Headers: []accesslog.Header{{Name: "x-request-id", Value: fmt.Sprintf("req-%d", i)}}}
		err = s.Replay(&rec)
		if i < MaxGateways && err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
	}
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("more than %d distinct values (the next at r.log:%d); field:NAME wants one value per gateway: use hash:x-request-id", MaxGateways, MaxGateways+1)) {
		t.Errorf("record %d: got %v, want the bound named", MaxGateways, err)
	}
}

// More gateways than MaxGateways are refused: each costs a lease manager per rule.
func TestGatewaysBound(t *testing.T) {
	if _, err := New(Config{Model: testModel(), Gateways: MaxGateways}); err != nil {
		t.Errorf("%d gateways: %v", MaxGateways, err)
	}
	if _, err := New(Config{Model: testModel(), Gateways: MaxGateways + 1}); err == nil {
		t.Errorf("%d gateways: got no error", MaxGateways+1)
	}
}

// New refuses more domains, or more descriptor shapes in a domain, than a hit can name.
func TestNewBoundsDomainsAndShapes(t *testing.T) {
	m := &policy.Model{}
	for i := range maxDomains + 1 {
		m.Domains = append(m.Domains, &policy.Domain{Name: fmt.Sprintf("d%d", i), Pos: policy.Pos{File: "policies/many.cue", Line: i + 1}})
	}
	if _, err := New(Config{Model: m}); err == nil || !strings.Contains(err.Error(), "more than 65536 domains") ||
		!strings.Contains(err.Error(), "d65536 (policies/many.cue:65537") {
		t.Errorf("New with %d domains: %v; want an error naming the first domain past the bound", len(m.Domains), err)
	}

	// 17 sources have 2^17-1 non-empty subsets, each a shape of its own.
	d := &policy.Domain{Name: "wide", Pos: policy.Pos{File: "policies/wide.cue", Line: 3}}
	for i := range 17 {
		d.Sources = append(d.Sources, &policy.Source{Key: fmt.Sprintf("k%d", i), Kind: policy.SourceHeader, Header: fmt.Sprintf("x-k%d", i)})
	}
	for set := 1; len(d.Rules) <= maxShapes; set++ {
		var match []policy.Match
		for i := range 17 {
			if set&(1<<i) != 0 {
				match = append(match, policy.Match{Key: d.Sources[i].Key, Kind: policy.MatchAny})
			}
		}
		d.Rules = append(d.Rules, &policy.Rule{Name: fmt.Sprintf("r%d", set), Match: match, Stage: policy.Stage{Name: policy.StageEnforce},
			Limits: []policy.Limit{{Requests: 1, WindowMs: 1000, Algorithm: policy.TokenBucket, Cost: 1}},
			Lease:  policyfixture.Lease(policyfixture.Bounds(1, 5))})
	}
	_, err := New(Config{Model: &policy.Model{Domains: []*policy.Domain{d}}})
	if err == nil || !strings.Contains(err.Error(), "65537 descriptor shapes, at most 65536") ||
		!strings.Contains(err.Error(), "policies/wide.cue:3") {
		t.Errorf("New with %d shapes in a domain: %v; want an error", len(d.Rules), err)
	}
}

// A shard's bucket, which it keeps between calls, is the one the time divides into, as time
// moves forward in steps small and large, across widenings and once finish caps it.
func TestShardBucketFollowsTime(t *testing.T) {
	s, err := New(Config{Model: testModel()})
	if err != nil {
		t.Fatal(err)
	}
	s.startMs = 1_714_564_800_000
	sh := s.shards[0]
	want := func() int {
		b := int((sh.nowUs/1000 - s.startMs) / sh.bucketMs)
		if sh.lastBucket >= 0 {
			return min(b, sh.lastBucket)
		}
		return b
	}
	sh.nowUs = s.startMs * 1000
	for i, step := range []int64{0, 1, 999, 999_000, 1, 1_000, 3_500_000, 7, 60_000_000, 1} {
		sh.nowUs += step
		if i == 5 || i == 8 {
			sh.widen()
		}
		if i == 9 {
			sh.lastBucket = 3
		}
		if got, w := sh.bucket(), want(); got != w {
			t.Errorf("step %d, %d µs in, %d ms buckets: bucket %d, want %d", i, sh.nowUs-s.startMs*1000, sh.bucketMs, got, w)
		}
	}
}

// A rule the replay cannot build is named with where it is written, as a domain is.
func TestRuleErrorsSayWhere(t *testing.T) {
	r := &policy.Rule{Name: "orders", Pos: policy.Pos{File: "p/edge.cue", Line: 12, Col: 3},
		Match: []policy.Match{{Key: "tenant", Kind: policy.MatchAny}}}
	d := &policy.Domain{Name: "edge", Rules: []*policy.Rule{r}}
	_, err := newDomainSim(d)
	if err == nil || err.Error() != `rule edge/orders (p/edge.cue:12:3): no source for descriptor key "tenant"` {
		t.Errorf("newDomainSim: got %v, want the rule and its place named", err)
	}
	if got := ruleWhere("edge", &policy.Rule{Name: "orders"}); got != "edge/orders" {
		t.Errorf("ruleWhere without a position: got %q", got)
	}
}

// The zero Config gets the documented defaults, which its report's settings show.
func TestConfigDefaults(t *testing.T) {
	m := examplePolicies(t)
	s, err := New(Config{Model: m})
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.Finish()
	if err != nil {
		t.Fatal(err)
	}
	want := report.Settings{Gateways: 1, Assignment: "round-robin", StoreLatency: "0", NATUsers: 20, BucketMs: 1000}
	if r.Settings != want {
		t.Errorf("settings %+v, want %+v", r.Settings, want)
	}
}

// TestGapSweeps: a key idle for 200 s of a log with no other traffic has its leases swept as it
// has with other traffic filling the gap, as an enforcer sweeps every second whatever comes. One
// tick stood for a gap's seconds, and a sweep due every other second was skipped: the leases the
// key held before the gap were spent after it, over a full bucket (22 would-deny decisions
// where the ideal engine had 30, with the other traffic 30).
func TestGapSweeps(t *testing.T) {
	m := &policy.Model{Domains: []*policy.Domain{{
		Name:    "d",
		Sources: []*policy.Source{{Key: "tenant", Kind: policy.SourceHeader, Header: "x-tenant-id"}},
		Rules: []*policy.Rule{{Name: "per-tenant", Match: []policy.Match{{Key: "tenant", Kind: policy.MatchAny}},
			Stage:  policy.Stage{Name: policy.StageEnforce},
			Limits: []policy.Limit{{Requests: 20, WindowMs: 10_000, Burst: 20, Algorithm: policy.TokenBucket, Cost: 1}},
			Lease:  policyfixture.Lease(policyfixture.TTL(2000))}},
	}}}
	at := func(ms int64, tenant string) accesslog.Record {
		return accesslog.Record{TimeMs: 1_735_689_600_000 + ms, Headers: []accesslog.Header{{Name: "x-tenant-id", Value: tenant}}}
	}
	var alone, filled []accesslog.Record
	for s := range int64(30) { // a request a second
		alone = append(alone, at(s*1000, "t1"))
	}
	for i := range int64(50) { // 200 s later, 50 in half a second
		alone = append(alone, at(230_000+i*10, "t1"))
	}
	for _, r := range alone {
		if r.TimeMs == 1_735_689_600_000+230_000 {
			for s := int64(30); s < 230; s++ { // the other tenant, a request a second through the gap
				filled = append(filled, at(s*1000, "t2"))
			}
		}
		filled = append(filled, r)
	}
	for _, tc := range []struct {
		name string
		recs []accesslog.Record
	}{{"alone", alone}, {"filled", filled}} {
		r := replay(t, Config{Model: m, Gateways: 1}, tc.recs)
		rl := ruleOf(t, r, "per-tenant")
		t.Logf("%s: would deny %d, ideal %d, over %d", tc.name, rl.WouldDeny, rl.IdealDeny, rl.OverAdmission)
		if rl.WouldDeny != rl.IdealDeny || rl.OverAdmission != 0 {
			t.Errorf("%s: would deny %d, ideal deny %d, over-admitted %d; want as many as the ideal engine, none over", tc.name, rl.WouldDeny, rl.IdealDeny, rl.OverAdmission)
		}
	}

	// A gap of centuries (a far-future timestamp) runs only its first seconds one by one.
	start := time.Now()
	far := append(alone, at(200*365*86_400_000, "t1"))
	replay(t, Config{Model: m, Gateways: 1}, far)
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("a replay across a gap of 200 years took %v", took)
	}
}

// TestRunEmptyLog: a log that holds no record, among others, is named in the report and warned
// about; an empty rotation among full logs passed without a word. Blank lines, or a CSV log's
// header row alone, are no record.
func TestRunEmptyLog(t *testing.T) {
	log := `{"start_time":"2024-05-01T12:00:00.000Z","path":"/a"}` + "\n"
	r, err := Run(context.Background(), RunConfig{Sim: Config{Model: testModel()}},
		[]Input{{Name: "empty.json", R: strings.NewReader("")}, {Name: "full.json", R: strings.NewReader(log)},
			{Name: "blank.json", R: strings.NewReader("\n  \r\n\n")}, {Name: "header.csv", R: strings.NewReader("\nstart_time,path\n\n")}})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(r.EmptyLogs) != "[empty.json blank.json header.csv]" {
		t.Errorf("empty logs: got %v, want [empty.json blank.json header.csv]", r.EmptyLogs)
	}
	if ws := report.Warnings(r); !slices.Contains(ws, "The log empty.json held no lines.") {
		t.Errorf("warnings: %q, want the empty log named", ws)
	}
}
