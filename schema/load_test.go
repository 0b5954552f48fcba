package schema

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/rlctl/rlctl/policy"
)

func TestLoadBad(t *testing.T) {
	tests := []struct {
		dir  string
		msg  string // a substring of the first problem's message
		at   string // the first problem's position, file:line (the file relative to the case)
		also string // a further position, if any
	}{
		{"syntax", "expected '}'", "policy.cue:6", ""},
		{"custom_message", "algorithm must be one of token_bucket, sliding_window, fixed_window", "policy.cue:7", ""},
		{"conflict", "conflicting values 20 and 10", "a.cue:7", "b.cue:3"},
		{"two_packages", `found packages "policies" and "other"`, "b.cue:1", "a.cue:1"},
		{"window_short", "window 500ms is out of range", "policy.cue:7", ""},
		{"window_long", "window 400d is out of range", "policy.cue:7", ""},
		{"canary_no_percent", "stage: percent is required for a canary stage", "policy.cue:8", ""},
		{"bad_calendar_date", `since "2025-02-31" is not a calendar date`, "policy.cue:8", ""},
		{"bad_rule_name", `rule name "a b" must start with a letter or '_'`, "policy.cue:5", ""},
		{"bad_duration", "duration must be a whole number followed by ms, s, m, h or d", "policy.cue:7", ""},
		{"bad_date", "date must be written YYYY-MM-DD", "policy.cue:8", ""},
		{"unknown_field", "field not allowed", "policy.cue:8", ""},
		{"unknown_source", `match key "tenant" at level 1: no source produces it (sources: tenant_id)`, "policy.cue:6", ""},
		{"duplicate_match", "rule r2 has the same match as rule r1", "policy.cue:9", "policy.cue:5"},
		{"no_domains", "no domains", "policy.cue:1", ""},
		{"empty_file", "no domains", "empty.cue:1", ""},
		{"waterfall_order", "identity tier jwt_subject is out of order", "policy.cue:4", ""},
		{"missing_limits", "domains.d.rules.r: limits is required", "policy.cue:5", ""},
		{"claim_colon", "a jwt_subject claim must not contain ':'", "policy.cue:4", ""},
		{"claim_paren", "a jwt_subject claim must not contain ':' or ')'", "policy.cue:4", ""},
		// A path without its '/' never matched, and turned the critical-path checks off.
		{"critical_path", "a critical path must start with '/'", "policy.cue:5", ""},
		{"tier_header", `header must be a header name such as "x-api-key"`, "policy.cue:4", ""},
	}
	for _, tt := range tests {
		t.Run(tt.dir, func(t *testing.T) {
			dir := filepath.Join("testdata", "bad", tt.dir)
			_, err := Load(dir)
			var probs Problems
			if !errors.As(err, &probs) || len(probs) == 0 {
				t.Fatalf("Load(%s): got error %v, want Problems", dir, err)
			}
			p := probs[0]
			if !strings.Contains(p.String(), tt.msg) {
				t.Errorf("got problem %q, want it to contain %q", p, tt.msg)
			}
			for _, pp := range p.Positions() {
				if !strings.HasPrefix(pp.File, dir) {
					t.Errorf("got position %s, want one in the user's files under %s", pp, dir)
				}
			}
			if got, want := lineOf(p.Pos), filepath.Join(dir, tt.at); got != want {
				t.Errorf("got position %s, want %s", p.Pos, want)
			}
			if tt.also != "" {
				if len(p.Related) == 0 {
					t.Fatalf("got no related position, want %s", tt.also)
				}
				if got, want := lineOf(p.Related[0]), filepath.Join(dir, tt.also); got != want {
					t.Errorf("got related position %s, want %s", p.Related[0], want)
				}
			}
		})
	}
}

func ent(k, v string) policy.Entry { return policy.Entry{Key: k, Value: v} }

func lineOf(p policy.Pos) string { return policy.Pos{File: p.File, Line: p.Line}.String() }

func TestLoadToolErrors(t *testing.T) {
	if err := os.MkdirAll(filepath.Join("testdata", "bad", "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		paths []string
		want  error
	}{
		{[]string{"testdata/bad/empty"}, ErrNoPolicies},
		{[]string{"testdata/bad/non_cue_only"}, ErrNoPolicies},
		{[]string{"testdata/bad/non_cue_only/README.md"}, ErrNoPolicies},
		{[]string{"testdata/does-not-exist"}, fs.ErrNotExist},
		{[]string{"testdata/good/defaults", "testdata/does-not-exist.cue"}, fs.ErrNotExist},
	}
	for _, tt := range tests {
		_, err := Load(tt.paths...)
		if !errors.Is(err, tt.want) {
			t.Errorf("Load(%v): got %v, want %v", tt.paths, err, tt.want)
		}
		if errors.As(err, new(Problems)) {
			t.Errorf("Load(%v): got Problems, want a tool error", tt.paths)
		}
	}
}

func TestLoadDefaults(t *testing.T) {
	m, err := Load("testdata/good/defaults")
	if err != nil {
		t.Fatal(err)
	}
	d := m.Domain("d")
	if d == nil {
		t.Fatal("no domain d")
	}
	if got, want := d.Gateway, (policy.Gateway{RLSTimeoutMs: 20, PerKeyQPSBudget: 10000}); got != want {
		t.Errorf("gateway: got %+v, want %+v", got, want)
	}
	if got, want := d.Source("tenant_id").Header, "x-tenant-id"; got != want {
		t.Errorf("header: got %q, want %q (lower-cased)", got, want)
	}
	rules := map[string]*policy.Rule{}
	for _, r := range d.Rules {
		rules[r.Name] = r
	}
	plain, tuned := rules["plain"], rules["tuned"]

	// The domain's defaults fill what a rule leaves out; built-in defaults fill the rest.
	if got, want := plain.Limits[0], (policy.Limit{Requests: 100, WindowMs: 60000, Burst: 100,
		Algorithm: policy.TokenBucket, Cost: 1, Pos: plain.Limits[0].Pos}); got != want {
		t.Errorf("plain limit: got %+v, want %+v", got, want)
	}
	if got, want := plain.Stage.Name, policy.StageSoft; got != want {
		t.Errorf("plain stage: got %s, want %s", got, want)
	}
	if got, want := plain.Lease, (policy.Lease{Min: 5, Max: 50, LookaheadMs: 250, LowWatermark: 10, TTLMs: 2000}); got != want {
		t.Errorf("plain lease: got %+v, want %+v", got, want)
	}
	if plain.FailureMode != policy.FailOpen || plain.StoreTimeoutMs != 5 || plain.DriftToleranceBP != 50 {
		t.Errorf("plain: got failure %s, store timeout %d, drift %d bp; want open, 5, 50",
			plain.FailureMode, plain.StoreTimeoutMs, plain.DriftToleranceBP)
	}

	// A rule's own settings win, field by field for the lease.
	if got, want := tuned.Limits[0], (policy.Limit{Requests: 10, WindowMs: 1000, Burst: 10,
		Algorithm: policy.SlidingWindow, Cost: 2, Pos: tuned.Limits[0].Pos}); got != want {
		t.Errorf("tuned limit: got %+v, want %+v", got, want)
	}
	if got, want := tuned.Stage, (policy.Stage{Name: policy.StageCanary, CanaryPercent: 5, Since: "2025-03-01", Pos: tuned.Stage.Pos}); got != want {
		t.Errorf("tuned stage: got %+v, want %+v", got, want)
	}
	if got, want := tuned.Lease, (policy.Lease{Min: 1, Max: 50, LookaheadMs: 250, LowWatermark: 10, TTLMs: 7 * 86400000}); got != want {
		t.Errorf("tuned lease: got %+v, want %+v", got, want)
	}
	if tuned.FailureMode != policy.FailClosed || tuned.FailureReason != "ledger" || tuned.StoreTimeoutMs != 3 {
		t.Errorf("tuned: got failure %s %q, store timeout %d; want closed \"ledger\", 3",
			tuned.FailureMode, tuned.FailureReason, tuned.StoreTimeoutMs)
	}
	if got, want := lineOf(tuned.Limits[0].Pos), "testdata/good/defaults/policy.cue:20"; got != want {
		t.Errorf("tuned limit position: got %s, want %s", got, want)
	}
}

// TestLoadGovernance decodes a domain's governance block, a stage's hold and a rule's reason,
// and the defaults of a domain without governance.
func TestLoadGovernance(t *testing.T) {
	const src = `package policies

domains: d: {
	sources: tenant_id: {kind: "header", header: "x-tenant-id"}
	governance: {
		dwell: {shadow: "3d", soft: "36h"}
		new_rules_at_shadow: false
		opt_out_reason:      "internal API, no external callers"
		removed: legacy: "replaced by tenant"
	}
	rules: r: {
		match: [{key: "tenant_id"}]
		limits: [{requests: 10, window: "1s"}]
		stage: {name: "shadow", since: "2025-06-02", hold: "waiting for the Q3 traffic review"}
		reason: "the ledger owns its own limits now"
	}
}
domains: e: {
	sources: tenant_id: {kind: "header", header: "x-tenant-id"}
	rules: r: {match: [{key: "tenant_id"}], limits: [{requests: 10, window: "1s"}]}
}
`
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "p.cue"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	d, e := m.Domain("d"), m.Domain("e")
	want := policy.Governance{ShadowDwellMs: 3 * 86400000, SoftDwellMs: 36 * 3600000,
		OptOutReason: "internal API, no external callers", Removed: map[string]string{"legacy": "replaced by tenant"},
		Pos: policy.Pos{File: filepath.Join(dir, "p.cue"), Line: 5, Col: 2}}
	if got := d.Governance; !reflect.DeepEqual(got, want) {
		t.Errorf("governance: got %+v, want %+v", got, want)
	}
	if got, want := e.Governance, (policy.Governance{ShadowDwellMs: DefaultDwellMs, SoftDwellMs: DefaultDwellMs,
		NewRulesAtShadow: true, Pos: e.Pos}); !reflect.DeepEqual(got, want) {
		t.Errorf("default governance: got %+v, want %+v", got, want)
	}
	r := d.Rules[0]
	if r.Stage.Hold != "waiting for the Q3 traffic review" || r.Reason != "the ledger owns its own limits now" {
		t.Errorf("got hold %q reason %q, want both set", r.Stage.Hold, r.Reason)
	}
	if got, want := d.Dwell(policy.StageSoft), int64(36*3600000); got != want {
		t.Errorf("Dwell(soft): got %d, want %d", got, want)
	}
}

// TestLoadRollout decodes a domain's rollout block, and leaves a domain without one at the zero
// value, which its snapshot leaves out.
func TestLoadRollout(t *testing.T) {
	const src = `package policies

domains: d: {
	sources: tenant_id: {kind: "header", header: "x-tenant-id"}
	rollout: {
		canary_percent: 20
		gates: {
			simulate: {max_false_positive: 0.25, required: true}
			prometheus: {max_would_deny: 1, window: "1h"}
		}
	}
	rules: r: {match: [{key: "tenant_id"}], limits: [{requests: 10, window: "1s"}]}
}
domains: e: {
	sources: tenant_id: {kind: "header", header: "x-tenant-id"}
	rollout: gates: prometheus: {max_would_deny: 0, required: true}
	rules: r: {match: [{key: "tenant_id"}], limits: [{requests: 10, window: "1s"}]}
}
domains: f: {
	sources: tenant_id: {kind: "header", header: "x-tenant-id"}
	rules: r: {match: [{key: "tenant_id"}], limits: [{requests: 10, window: "1s"}]}
}
`
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "p.cue"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	bp := func(n int64) *int64 { return &n }
	for _, tt := range []struct {
		domain string
		want   policy.RolloutSettings
		canary int
	}{
		{"d", policy.RolloutSettings{CanaryPercent: 20,
			Simulate:   policy.GateSettings{MaxShareBP: bp(25), Required: true},
			Prometheus: policy.GateSettings{MaxShareBP: bp(100), WindowMs: 3600000}}, 20},
		// A threshold of 0 is set, not absent.
		{"e", policy.RolloutSettings{Prometheus: policy.GateSettings{MaxShareBP: bp(0), Required: true}}, policy.DefaultCanaryPercent},
		{"f", policy.RolloutSettings{}, policy.DefaultCanaryPercent},
	} {
		got := m.Domain(tt.domain).Rollout
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("domain %s: got rollout %+v, want %+v", tt.domain, got, tt.want)
		}
		if got := got.Canary(); got != tt.canary {
			t.Errorf("domain %s: got canary %d%%, want %d%%", tt.domain, got, tt.canary)
		}
	}
	var b strings.Builder
	if err := policy.WriteSnapshot(&b, &policy.Model{Domains: []*policy.Domain{m.Domain("f")}}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), `"rollout"`) {
		t.Errorf("got snapshot\n%s\nwant no rollout field for a domain without the block", b.String())
	}
}

// TestLoadPrecedence checks that rules spread over files come out in Lookup's order: level by
// level, exact before wildcard (in declared order) before key only, parents before children.
func TestLoadPrecedence(t *testing.T) {
	m, err := Load("testdata/good/split")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range m.Domain("d").Rules {
		got = append(got, r.Name)
	}
	want := []string{"acme", "acme_orders", "any_tenant_v1", "any_tenant_v1_orders", "any_tenant_any_path"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got order %v, want %v", got, want)
	}
}

func TestLoadExample(t *testing.T) {
	m, err := Load("../policies")
	if err != nil {
		t.Fatalf("Load(../policies): %v", err)
	}
	d := m.Domain("edge_gateway_limits")
	if d == nil {
		t.Fatal("no domain edge_gateway_limits")
	}
	tests := []struct {
		entries []policy.Entry
		rule    string // "" for no match
	}{
		{[]policy.Entry{ent("tenant_id", "shopify"), ent("charge", "/v1/payments/charge")}, "shopify_payments"},
		{[]policy.Entry{ent("tenant_id", "shopify"), ent("catalog", "/catalog/")}, ""}, // no backtracking
		{[]policy.Entry{ent("tenant_id", "walmart"), ent("catalog", "/catalog/")}, "tenant_catalog"},
		{[]policy.Entry{ent("tenant_id", "walmart"), ent("dashboard", "/v1/dashboard/")}, "tenant_dashboard"},
		{[]policy.Entry{ent("tenant_id", "bigcorp"), ent("orders", "/v1/orders"), ent("client_ip", "198.51.100.7")}, "bigcorp_orders"},
		{[]policy.Entry{ent("plan", "enterprise"), ent("client", "jwt_subject:u1")}, "enterprise"},
		{[]policy.Entry{ent("plan", "developer_free"), ent("client", "api_key:k1")}, "developer_free"},
		{[]policy.Entry{ent("plan", "developer_free"), ent("client", "subnet:203.0.113.0/24")}, ""},
		{[]policy.Entry{ent("client", "subnet:203.0.113.0/24")}, "anonymous_subnets"},
		{[]policy.Entry{ent("remote_subnet", "2001:db8:1:2::/64")}, "subnet_flood_guard"},
	}
	for i, tt := range tests {
		r, ok := d.Lookup(tt.entries)
		got := ""
		if ok {
			got = r.Name
		}
		if got != tt.rule {
			t.Errorf("step %d: Lookup(%v): got %q, want %q", i, tt.entries, got, tt.rule)
		}
	}
}

// TestSnapshotRoundTrip checks that a snapshot of the example repository reads back to the same
// model, but for where its settings are written (Rule.SettingPos), which only lint reads and a
// snapshot leaves out.
func TestSnapshotRoundTrip(t *testing.T) {
	m, err := Load("../policies")
	if err != nil {
		t.Fatal(err)
	}
	withSettings := 0
	for _, d := range m.Domains {
		for _, r := range d.Rules {
			if len(r.SettingPos) > 0 {
				withSettings++
			}
			r.SettingPos = nil
		}
	}
	if withSettings == 0 {
		t.Error("no rule of the example repository has positions of its settings")
	}
	var b strings.Builder
	if err := policy.WriteSnapshot(&b, m); err != nil {
		t.Fatal(err)
	}
	got, err := policy.ReadSnapshot(strings.NewReader(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, m) {
		t.Errorf("round trip changed the model")
	}
}

func TestParseDuration(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"250ms", 250, true},
		{"30s", 30000, true},
		{"5m", 300000, true},
		{"1h", 3600000, true},
		{"7d", 604800000, true},
		{"0s", 0, true},
		{"1.5s", 0, false},
		{"1h30m", 0, false},
		{"s", 0, false},
		{"-1s", 0, false},
		{"10", 0, false},
		{"99999999999999999999d", 0, false},
		{"9999999999999999d", 0, false},
	}
	for _, tt := range tests {
		got, err := ParseDuration(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("ParseDuration(%q): got %d, %v; want %d, ok %v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

func TestSchemaCompiles(t *testing.T) {
	// Loading the good cases compiles the schema; this names the failure if it does not.
	if _, probs := build1(nil, nil); len(probs) > 0 && strings.Contains(probs.Error(), "internal error") {
		t.Fatal(probs)
	}
}
