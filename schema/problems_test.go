package schema

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rlctl/rlctl/policy"
)

// TestLoadProblems loads one-file policies that must not load, each with one problem: its
// message, position (line:col), path and check name. A problem with a value is at the value, a
// required field left out at the struct that lacks it, a name that is wrong at the name.
func TestLoadProblems(t *testing.T) {
	const head = "package policies\n\ndomains: d: {\n\tsources: tenant_id: {kind: \"header\", header: \"x-tenant-id\"}\n"
	rule := func(extra string) string {
		return head + "\trules: r: {\n\t\tmatch: [{key: \"tenant_id\"}]\n\t\tlimits: [{requests: 10, window: \"1s\"}]\n\t\t" + extra + "\n\t}\n}\n"
	}
	tests := []struct {
		name, src string
		msg       string // a substring of the message
		at        string // line:col
		path      string
		check     string
	}{
		{"zero window", strings.Replace(rule(""), `window: "1s"`, `window: "0s"`, 1),
			"window 0s is out of range: a window runs from 1s to 365d", "7:35", "domains.d.rules.r.limits.0.window", ""},
		{"zero window in ms", strings.Replace(rule(""), `window: "1s"`, `window: "0ms"`, 1),
			"window 0ms is out of range", "7:35", "domains.d.rules.r.limits.0.window", ""},
		{"zero fallback window", rule(`failure: {mode: "open", fallback: {requests: 5, window: "0ms"}}`),
			"window 0ms is out of range", "8:59", "domains.d.rules.r.failure.fallback.window", ""},
		{"zero store timeout", rule(`store_timeout: "0ms"`),
			"a whole number above zero", "8:18", "domains.d.rules.r.store_timeout", ""},
		{"zero lease ttl", rule(`lease: ttl: "0s"`),
			"a whole number above zero", "8:15", "domains.d.rules.r.lease.ttl", ""},
		{"zero lease lookahead", rule(`lease: lookahead: "0ms"`),
			"a whole number above zero", "8:21", "domains.d.rules.r.lease.lookahead", ""},
		{"zero rls timeout", strings.Replace(rule(""), "domains: d: {\n", "domains: d: {\n\tgateway: rls_timeout: \"0ms\"\n", 1),
			"a whole number above zero", "4:24", "domains.d.gateway.rls_timeout", ""},
		{"lease max below the default min", rule(`lease: {max: 3}`),
			"lease min 5 is above lease max 3", "5:9", "domains.d.rules.r.lease", "lease-bounds"},
		{"lease min from the domain's defaults", strings.Replace(rule(`lease: {max: 20}`), "\trules:", "\tdefaults: lease: min: 50\n\trules:", 1),
			"lease min 50 is above lease max 20", "6:9", "domains.d.rules.r.lease", "lease-bounds"},
		{"canary without percent", rule(`stage: {name: "canary", since: "2025-01-01"}`),
			`percent is required for a canary stage: write stage: {name: "canary", percent: 5, since: "YYYY-MM-DD"}`, "8:10", "domains.d.rules.r.stage", "canary-percent"},
		{"header source without header", strings.Replace(rule(""), "\trules:", "\tsources: t2: {kind: \"header\"}\n\trules:", 1),
			"header is required for kind header", "5:15", "domains.d.sources.t2", ""},
		{"jwt_claim source without claim", strings.Replace(rule(""), "\trules:", "\tsources: c: {kind: \"jwt_claim\"}\n\trules:", 1),
			"claim is required for kind jwt_claim", "5:14", "domains.d.sources.c", ""},
		{"generic_key source without value", strings.Replace(rule(""), "\trules:", "\tsources: g: {kind: \"generic_key\"}\n\trules:", 1),
			"value is required for kind generic_key", "5:14", "domains.d.sources.g", ""},
		{"source without kind", strings.Replace(rule(""), "\trules:", "\tsources: k: {header: \"x-k\"}\n\trules:", 1),
			"kind is required", "5:14", "domains.d.sources.k", ""},
		// CUE says "incompatible list lengths (0 and 1)".
		{"empty match", strings.Replace(rule(""), `match: [{key: "tenant_id"}]`, "match: []", 1),
			"a rule needs at least one match entry", "6:10", "domains.d.rules.r.match", ""},
		{"empty limits", strings.Replace(rule(""), `limits: [{requests: 10, window: "1s"}]`, "limits: []", 1),
			"a rule needs at least one limit", "7:11", "domains.d.rules.r.limits", ""},
		{"limit without window", strings.Replace(rule(""), `, window: "1s"`, "", 1),
			"window is required", "7:12", "domains.d.rules.r.limits.0", ""},
		{"fallback without window", rule(`failure: {mode: "open", fallback: {requests: 5}}`),
			"window is required", "8:37", "domains.d.rules.r.failure.fallback", ""},
		{"failure without mode", rule(`failure: reason: "x"`),
			"mode is required", "8:12", "domains.d.rules.r.failure", ""},
		{"sub_shards without attribute", rule(`sub_shards: count: 4`),
			"attribute is required", "8:15", "domains.d.rules.r.sub_shards", ""},
		{"canary percent out of range", rule(`stage: {name: "canary", percent: 0, since: "2025-01-01"}`),
			"canary percent must be a whole number from 1 to 100", "8:36", "domains.d.rules.r.stage.percent", "canary-percent"},
		{"impossible date", rule(`stage: {name: "shadow", since: "2025-02-31"}`),
			`since "2025-02-31" is not a calendar date`, "8:34", "domains.d.rules.r.stage.since", ""},
		{"bad domain name", strings.Replace(rule(""), "domains: d:", `domains: "1st":`, 1),
			`domain name "1st" must start with a letter or '_'`, "3:10", `domains."1st"`, ""},
		{"bad source name", strings.Replace(rule(""), "\trules:", "\tsources: \"tenant id\": {kind: \"header\", header: \"x-t\"}\n\trules:", 1),
			`source name "tenant id" must start`, "5:11", `domains.d.sources."tenant id"`, ""},
		{"bad region name", rule(`regions: {"us east": 100}`),
			`region name "us east" must start`, "8:13", `domains.d.rules.r.regions."us east"`, ""},
		{"opt-out without a reason", strings.Replace(rule(""), "\trules:", "\tgovernance: new_rules_at_shadow: false\n\trules:", 1),
			"opt_out_reason is required when new_rules_at_shadow is false", "5:35", "domains.d.governance.new_rules_at_shadow", ""},
		{"bad dwell", strings.Replace(rule(""), "\trules:", "\tgovernance: dwell: shadow: \"1w\"\n\trules:", 1),
			"duration must be a whole number", "5:29", "domains.d.governance.dwell.shadow", ""},
		{"canary_percent 0", strings.Replace(rule(""), "\trules:", "\trollout: canary_percent: 0\n\trules:", 1),
			"canary_percent must be a whole number from 1 to 100", "5:27", "domains.d.rollout.canary_percent", ""},
		{"canary_percent 2.5", strings.Replace(rule(""), "\trules:", "\trollout: canary_percent: 2.5\n\trules:", 1),
			"canary_percent must be a whole number from 1 to 100", "5:27", "domains.d.rollout.canary_percent", ""},
		{"max_false_positive over 100", strings.Replace(rule(""), "\trules:", "\trollout: gates: simulate: max_false_positive: 101\n\trules:", 1),
			"percent must be between 0 and 100", "5:48", "domains.d.rollout.gates.simulate.max_false_positive", ""},
		{"max_would_deny with three decimals", strings.Replace(rule(""), "\trules:", "\trollout: gates: prometheus: max_would_deny: 0.125\n\trules:", 1),
			"max_would_deny has more than two decimals", "5:46", "domains.d.rollout.gates.prometheus.max_would_deny", ""},
		{"zero prometheus window", strings.Replace(rule(""), "\trules:", "\trollout: gates: prometheus: window: \"0m\"\n\trules:", 1),
			"a whole number above zero", "5:38", "domains.d.rollout.gates.prometheus.window", ""},
		{"simulate window", strings.Replace(rule(""), "\trules:", "\trollout: gates: simulate: window: \"1h\"\n\trules:", 1),
			"field not allowed", "5:28", "domains.d.rollout.gates.simulate.window", ""},
		{"required not a bool", strings.Replace(rule(""), "\trules:", "\trollout: gates: prometheus: required: \"yes\"\n\trules:", 1),
			"required is true or false, not a string", "5:40", "domains.d.rollout.gates.prometheus.required", ""},
		{"burst on a sliding window", strings.Replace(rule(""), `window: "1s"}`, `window: "1s", algorithm: "sliding_window", burst: 20}`, 1),
			"burst applies to token_bucket only: a sliding_window admits at most requests per window", "7:77", "domains.d.rules.r.limits.0.burst", ""},
		{"burst on a fixed window", strings.Replace(rule(""), `window: "1s"}`, `burst: 20, window: "1s", algorithm: "fixed_window"}`, 1),
			"burst applies to token_bucket only: a fixed_window admits", "7:34", "domains.d.rules.r.limits.0.burst", ""},
		{"canary shorthand", rule(`stage: "canary"`),
			`a canary stage needs its share of enforcers and the day it began: write stage: {name: "canary", percent: 5, since: "YYYY-MM-DD"}`,
			"8:10", "domains.d.rules.r.stage", "canary-percent"},
		{"canary shorthand in the defaults", strings.Replace(rule(""), "\trules:", "\tdefaults: stage: \"canary\"\n\trules:", 1),
			`a canary stage needs its share of enforcers`, "5:19", "domains.d.defaults.stage", "canary-percent"},
		{"misspelt stage shorthand", rule(`stage: "enforced"`),
			`"enforced" is not a stage (did you mean "enforce"?): write stage: "shadow", "soft" or "enforce", or a block such as stage: {name: "canary"`,
			"8:10", "domains.d.rules.r.stage", ""},
		{"unknown stage shorthand", rule(`stage: "live"`),
			`"live" is not a stage: write stage: "shadow", "soft" or "enforce", or a block`, "8:10", "domains.d.rules.r.stage", ""},
		{"stage a number", rule(`stage: 3`),
			`stage must be a stage name ("shadow", "soft" or "enforce") or a block such as stage: {name: "canary", percent: 5, since: "YYYY-MM-DD"}`,
			"8:10", "domains.d.rules.r.stage", ""},
		{"misspelt rule field", rule(`ownr: "team-a"`),
			`field not allowed: did you mean "owner"?`, "8:3", "domains.d.rules.r.ownr", ""},
		{"misspelt limits", strings.Replace(rule(""), "limits: [", "limit: [", 1),
			`field not allowed: did you mean "limits"?`, "7:3", "domains.d.rules.r.limit", ""},
		{"misspelt field of a limit", strings.Replace(rule(""), `window: "1s"}`, `window: "1s", algoritm: "fixed_window"}`, 1),
			`field not allowed: did you mean "algorithm"?`, "7:41", "domains.d.rules.r.limits.0.algoritm", ""},
		{"misspelt stage field", rule(`stage: {name: "shadow", sinc: "2025-01-01"}`),
			`field not allowed: did you mean "since"?`, "8:27", "domains.d.rules.r.stage.sinc", ""},
		{"misspelt lease field", rule(`lease: mxa: 5`),
			`field not allowed: did you mean "max"?`, "8:10", "domains.d.rules.r.lease.mxa", ""},
		{"empty hold", rule(`stage: {name: "shadow", since: "2025-01-01", hold: ""}`),
			"hold must not be empty", "8:54", "domains.d.rules.r.stage.hold", ""},
		// Suggestions past the edit distance: at the top level, an abbreviation, the fields
		// allowed in a small block, and envoyproxy/ratelimit's fields, written by habit.
		{"misspelt top-level field", strings.Replace(rule(""), "domains: d: {", "domain: d: {", 1),
			`field not allowed: did you mean "domains"?`, "3:1", "domain", ""},
		{"abbreviated field", strings.Replace(rule(""), `{key: "tenant_id"}`, `{key: "tenant_id", val: "x"}`, 1),
			`field not allowed: did you mean "value"?`, "6:30", "domains.d.rules.r.match.0.val", ""},
		{"unknown field of a small block", strings.Replace(rule(""), `{key: "tenant_id"}`, `{key: "tenant_id", xyzzy: 1}`, 1),
			`field not allowed (allowed here: key, value)`, "6:30", "domains.d.rules.r.match.0.xyzzy", ""},
		// A value of the wrong kind says what the field holds, with an example, not the
		// schema's definition.
		{"failure a string", rule(`failure: "closed"`),
			`failure is a block {...}, not a string: write failure: {mode: "closed"`, "8:12", "domains.d.rules.r.failure", ""},
		{"match entry a string", strings.Replace(rule(""), `match: [{key: "tenant_id"}]`, `match: ["tenant_id"]`, 1),
			`each entry of match is a block {...}, not a string: write match: [{key:`, "6:11", "domains.d.rules.r.match.0", ""},
		{"limits a block", strings.Replace(rule(""), `limits: [{requests: 10, window: "1s"}]`, `limits: {requests: 10, window: "1s"}`, 1),
			`limits is a list [...], not a block {...}: write limits: [{`, "7:11", "domains.d.rules.r.limits", ""},
		{"envoyproxy/ratelimit's shadow_mode", rule(`shadow_mode: true`),
			`field not allowed: a rule's stage says it: stage: "shadow"`, "8:3", "domains.d.rules.r.shadow_mode", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			file := filepath.Join(dir, "p.cue")
			if err := os.WriteFile(file, []byte(tt.src), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := Load(dir)
			var probs Problems
			if !errors.As(err, &probs) {
				t.Fatalf("got %v, want Problems", err)
			}
			if len(probs) != 1 {
				t.Fatalf("got %d problems, want 1:\n%v", len(probs), probs)
			}
			p := probs[0]
			if !strings.Contains(p.Message, tt.msg) {
				t.Errorf("got message %q, want it to contain %q", p.Message, tt.msg)
			}
			if got, want := p.Pos.String(), file+":"+tt.at; got != want {
				t.Errorf("got position %s, want %s", got, want)
			}
			if p.Path != tt.path || p.Check != tt.check {
				t.Errorf("got path %q check %q, want %q %q", p.Path, p.Check, tt.path, tt.check)
			}
		})
	}
}

// TestLoadValueColumns: an error about a value points at the value's first character, not at
// its field's name, whichever check finds it: a CUE conflict, the schema's own message or the
// loader's checks. Each policy is one line; ‸ marks the value.
func TestLoadValueColumns(t *testing.T) {
	const head = "package policies\n\ndomains: d: sources: tenant_id: {kind: \"header\", header: \"x-tenant-id\"}\n"
	const rule = `domains: d: rules: r: {match: [{key: "tenant_id"}], `
	tests := []struct{ name, line, msg string }{
		{"conflict", `domains: d: rollout: gates: prometheus: required: ‸"yes"`, "required is true or false, not a string"},
		{"schema message", rule + `limits: [{requests: ‸"ten", window: "1s"}]}`, "must be a positive whole number"},
		{"schema duration", rule + `limits: [{requests: 10, window: "1s"}], store_timeout: ‸"0ms"}`, "a whole number above zero"},
		{"window range", rule + `limits: [{requests: 10, window: ‸"500ms"}]}`, "window 500ms is out of range"},
		{"burst on a window", rule + `limits: [{requests: 10, window: "1s", algorithm: "fixed_window", burst: ‸20}]}`, "burst applies to token_bucket only"},
		{"calendar date", rule + `limits: [{requests: 10, window: "1s"}], stage: {name: "shadow", since: ‸"2025-02-31"}}`, "is not a calendar date"},
		{"opt-out", `domains: d: governance: new_rules_at_shadow: ‸false`, "opt_out_reason is required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			col := strings.Index(tt.line, "‸") + 1
			dir := t.TempDir()
			file := filepath.Join(dir, "p.cue")
			src := head + strings.Replace(tt.line, "‸", "", 1) + "\n"
			if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := Load(dir)
			var probs Problems
			if !errors.As(err, &probs) || len(probs) != 1 {
				t.Fatalf("got %v, want one problem", err)
			}
			if !strings.Contains(probs[0].Message, tt.msg) {
				t.Errorf("got message %q, want it to contain %q", probs[0].Message, tt.msg)
			}
			if got, want := probs[0].Pos, (policy.Pos{File: file, Line: 4, Col: col}); got != want {
				t.Errorf("got position %s, want %s", got, want)
			}
		})
	}
}

// TestLoadEmptySlices: a domain without rules has "rules": [] in its snapshot, not null.
func TestLoadEmptySlices(t *testing.T) {
	dir := t.TempDir()
	src := "package policies\n\ndomains: d: sources: tenant_id: {kind: \"header\", header: \"x-tenant-id\"}\n"
	if err := os.WriteFile(filepath.Join(dir, "p.cue"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := policy.WriteSnapshot(&b, m); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), `"rules": []`) || strings.Contains(b.String(), "null") {
		t.Errorf("got snapshot\n%s\nwant \"rules\": [] and no null", b.String())
	}
}

// TestLoadStageShorthand: a stage that needs nothing else may be written as its name, in a rule
// or in the defaults, and may be completed by a block elsewhere.
func TestLoadStageShorthand(t *testing.T) {
	src := `package policies

domains: d: {
	sources: tenant_id: {kind: "header", header: "x-tenant-id"}
	defaults: stage: "soft"
	rules: {
		shadowed: {match: [{key: "tenant_id", value: "a"}], limits: [{requests: 10, window: "1s"}], stage: "shadow"}
		enforced: {match: [{key: "tenant_id", value: "b"}], limits: [{requests: 10, window: "1s"}], stage: "enforce"}
		inherits: {match: [{key: "tenant_id", value: "c"}], limits: [{requests: 10, window: "1s"}]}
		dated: {match: [{key: "tenant_id", value: "d"}], limits: [{requests: 10, window: "1s"}], stage: "shadow"}
	}
}
domains: [string]: rules: dated: stage: since: "2025-06-01"
`
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "p.cue"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]policy.Stage{
		"shadowed": {Name: policy.StageShadow},
		"enforced": {Name: policy.StageEnforce},
		"inherits": {Name: policy.StageSoft},
		"dated":    {Name: policy.StageShadow, Since: "2025-06-01"},
	}
	for _, r := range m.Domain("d").Rules {
		got := r.Stage
		got.Pos = policy.Pos{}
		if got != want[r.Name] {
			t.Errorf("rule %s: got stage %+v, want %+v", r.Name, got, want[r.Name])
		}
		if r.Stage.Pos.File == "" {
			t.Errorf("rule %s: got no stage position, want one in the user's file", r.Name)
		}
	}
}

// TestTypeMessageNames: a rule named like a schema field (limits) gets no example of that
// field; the schema's own field does.
func TestTypeMessageNames(t *testing.T) {
	const format = "conflicting values %s and %s (mismatched types %s and %s)"
	args := []any{`"x"`, "{...}", "string", "struct"}
	if msg, _ := typeMessage(format, args, []string{"domains", "d", "rules", "limits"}); strings.Contains(msg, "write") {
		t.Errorf("a rule named limits: %q, want no example", msg)
	}
	if msg, _ := typeMessage(format, args, []string{"domains", "d", "rules", "r", "failure"}); !strings.Contains(msg, "write failure: {") {
		t.Errorf("a rule's failure: %q, want its example", msg)
	}
}
