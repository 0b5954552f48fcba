// Package report owns the simulation report: its stable JSON schema and the renderings of it as
// a terminal table, JSON, Markdown for a pull-request comment and a self-contained HTML page
// with inline SVG charts.
//
// # JSON schema (schema "rlctl.simulate/v1")
//
// The JSON output is public API. Fields are only ever added; a change of meaning changes the
// schema string. Times are Unix milliseconds, rates are fractions in [0, 1].
//
//	{
//	  "schema": "rlctl.simulate/v1",
//	  "policies": "policies",            // the policy directory
//	  "logs": ["access.log"],
//	  "requests": 1000000,               // records replayed
//	  "bad_lines": 3,                    // lines skipped as unparseable
//	  "bad_line_samples": [{"file":"access.log","line":17,"error":"...","text":"..."}],
//	  "reordered": 0,                    // records logged before an earlier one; replayed late
//	  "first_reordered": "a.log:17",     // the first of them, when there are any
//	  "assign_missing": 0,               // records without the field of --assign hash: or field:
//	  "unseen_fields": ["x-tenant-id=tenantt"], // --field mappings whose key no record had
//	  "empty_logs": ["b.json"],                 // logs of several that held no record; absent when none
//	  "denied_keys_dropped": 0,          // denied keys forgotten to bound memory (omitted when 0)
//	  "nat_untracked": 0,                // user sightings behind untracked addresses (omitted when 0)
//	  "start_ms": 1714564800000, "end_ms": 1714565400000,
//	  "settings": {"gateways":4, "assignment":"round-robin", "store_latency":"1ms",
//	               "nat_users":20, "bucket_ms":5000},
//	  "totals": {
//	    "matched": 950000,                // requests that matched at least one rule
//	    "requests_would_deny": 1100,      // requests some rule would deny (any stage)
//	    "requests_denied": 700,           // requests some rule would reject given its stage
//	    "requests_with_user": 990000,     // requests with a JWT subject or TLS fingerprint
//	    // The rest sum the rules' decisions: a request that two rules would deny counts twice.
//	    "decisions": 2400000,             // the rules' requests
//	    "would_deny": 1200,               // engine said over (any stage)
//	    "denied": 800,                    // would have been rejected given each rule's stage
//	    "ideal_deny": 1150,               // an ideal single global bucket (no leasing) said over
//	    "over_admission": 10, "under_admission": 60,
//	    "false_positives": 40, "false_positive_rate": 0.0333,
//	    "legit_denials": 30, "nat_collateral": 10,
//	    "deny_rate": 0.0011               // requests_would_deny / requests
//	  },
//	  "rules": [{
//	    "domain":"edge", "rule":"per-tenant", "stage":"enforce", "pos":"policies/edge.cue:12:3",
//	    "limit":"100/1s burst 200",
//	    "requests":5000, "would_deny":100, "denied":100, "ideal_deny":95,
//	    "over_admission":1, "under_admission":6,
//	    "stranded_tokens_max":40, "stranded_tokens_end":12,
//	    "lease_max":50, "store_calls":300,
//	    "false_positives":3, "legit_denials":2, "nat_collateral":1,
//	    "top_denied":[{"value":"tenant=acme","denials":80,"requests":900,"legit":true,"legit_denials":80}],
//	    "series":{"start_ms":..., "bucket_ms":5000, "requests":[...], "would_deny":[...],
//	              "ideal_deny":[...], "lease":[...]}
//	  }],
//	  "thresholds": [{"expr":"false_positive_rate>0.5%","value":0.0333,"crossed":true}],
//	  "failed": true,                     // a --fail-if threshold was crossed
//	  "verdict": "fail"                   // "no_thresholds", "pass" or "fail"
//	}
//
// over_admission counts requests the leased gateways admitted that the ideal bucket denied;
// under_admission the reverse. False positives are legit_denials (would-deny decisions against
// identities marked legitimate) plus nat_collateral (would-deny decisions on an address or
// subnet key behind which at least settings.nat_users distinct users were seen);
// false_positive_rate is false_positives / would_deny.
//
// verdict is "no_thresholds" when no --fail-if was given (thresholds is empty and failed is
// false: nothing was checked, whatever the figures), "pass" when every threshold held and
// "fail" when one was crossed.
package report

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
)

// Schema names the JSON schema version.
const Schema = "rlctl.simulate/v1"

// Report is the result of a simulation.
type Report struct {
	Schema         string    `json:"schema"`
	Policies       string    `json:"policies"`
	Logs           []string  `json:"logs"`
	Requests       int64     `json:"requests"`
	BadLines       int64     `json:"bad_lines"`
	BadLineSamples []BadLine `json:"bad_line_samples"`
	// Reordered counts records whose time was before an earlier record's (of their own log,
	// when logs are merged); they were replayed at the later time.
	Reordered int64 `json:"reordered"`
	// FirstReordered is where the first reordered record is, as FILE:LINE; empty when none is.
	// One record from far in the future makes every later one reordered: look there first.
	FirstReordered string `json:"first_reordered,omitempty"`
	// AssignMissing counts records without the field a hash or field assignment reads
	// (Settings.Assignment): a hash sends them all to one gateway, a field to "unnamed".
	AssignMissing int64 `json:"assign_missing"`
	// UnseenFields are the --field mappings (NAME=KEY) whose KEY no record of any log had: a
	// misspelt key leaves its field empty in every record.
	UnseenFields []string `json:"unseen_fields"`
	// EmptyLogs are the logs, of several, that held no record (no line but blank ones and a CSV
	// header): an empty rotation among full ones would otherwise pass unseen (a run whose every
	// log is empty is an error).
	EmptyLogs []string `json:"empty_logs,omitempty"`
	// DeniedKeysDropped counts denied keys whose statistics the replay forgot, the fewest
	// denied first, to keep its memory bounded: top_denied and nat_collateral leave them out.
	DeniedKeysDropped int64 `json:"denied_keys_dropped,omitempty"`
	// NATUntracked counts sightings of users behind addresses the shared-NAT check did not
	// track, once it tracked as many addresses as it holds: nat_collateral may be low.
	NATUntracked int64       `json:"nat_untracked,omitempty"`
	StartMs      int64       `json:"start_ms"`
	EndMs        int64       `json:"end_ms"`
	Settings     Settings    `json:"settings"`
	Totals       Totals      `json:"totals"`
	Rules        []*Rule     `json:"rules"`
	Thresholds   []Threshold `json:"thresholds"`
	Failed       bool        `json:"failed"`
}

// BadLine is one skipped line.
type BadLine struct {
	File  string `json:"file"`
	Line  int64  `json:"line"`
	Error string `json:"error"`
	Text  string `json:"text"`
}

// Settings echo the simulation's parameters.
type Settings struct {
	Gateways     int    `json:"gateways"`
	Assignment   string `json:"assignment"`
	StoreLatency string `json:"store_latency"`
	NATUsers     int    `json:"nat_users"`
	BucketMs     int64  `json:"bucket_ms"`
}

// Counts are the figures reported per rule and in total.
type Counts struct {
	Requests       int64 `json:"requests"`
	WouldDeny      int64 `json:"would_deny"`
	Denied         int64 `json:"denied"`
	IdealDeny      int64 `json:"ideal_deny"`
	OverAdmission  int64 `json:"over_admission"`
	UnderAdmission int64 `json:"under_admission"`
	FalsePositives int64 `json:"false_positives"`
	LegitDenials   int64 `json:"legit_denials"`
	NATCollateral  int64 `json:"nat_collateral"`
}

// Totals count requests (Matched, RequestsWouldDeny, RequestsDenied, DenyRate and
// RequestsWithUser) and sum the rules' decisions (the rest).
type Totals struct {
	Matched           int64   `json:"matched"`
	RequestsWouldDeny int64   `json:"requests_would_deny"`
	RequestsDenied    int64   `json:"requests_denied"`
	RequestsWithUser  int64   `json:"requests_with_user"`
	Decisions         int64   `json:"decisions"`
	WouldDeny         int64   `json:"would_deny"`
	Denied            int64   `json:"denied"`
	IdealDeny         int64   `json:"ideal_deny"`
	OverAdmission     int64   `json:"over_admission"`
	UnderAdmission    int64   `json:"under_admission"`
	FalsePositives    int64   `json:"false_positives"`
	FalsePositiveRate float64 `json:"false_positive_rate"`
	LegitDenials      int64   `json:"legit_denials"`
	NATCollateral     int64   `json:"nat_collateral"`
	DenyRate          float64 `json:"deny_rate"`
}

// Rule is one rule's results.
type Rule struct {
	Domain string `json:"domain"`
	Rule   string `json:"rule"`
	Stage  string `json:"stage"`
	Pos    string `json:"pos,omitempty"`
	Limit  string `json:"limit"`
	Counts
	StrandedMax int64      `json:"stranded_tokens_max"`
	StrandedEnd int64      `json:"stranded_tokens_end"`
	LeaseMax    int64      `json:"lease_max"`
	StoreCalls  int64      `json:"store_calls"`
	TopDenied   []Identity `json:"top_denied"`
	Series      Series     `json:"series"`
}

// Identity is one descriptor value and how it fared.
type Identity struct {
	Value   string `json:"value"`
	Denials int64  `json:"denials"`
	// Requests counts the key's requests since the replay last forgot it: a key idle for
	// twice its rule's TTL that was never denied is forgotten, memory following the live keys,
	// and counts again from its next request.
	Requests int64 `json:"requests"`
	// Legit says some of its denials were of requests marked legitimate (LegitDenials of
	// them): the value itself may be an address that legitimate and other callers share.
	Legit        bool  `json:"legit"`
	LegitDenials int64 `json:"legit_denials,omitempty"`
	// Users is the number of distinct users seen behind an address or subnet value (0 when
	// the value is not an address). Counting stops at 100, or at settings.nat_users when that
	// is more; UsersCapped then says there may be more.
	Users       int  `json:"users,omitempty"`
	UsersCapped bool `json:"users_capped,omitempty"`
}

// Series is a rule's time series, in buckets of BucketMs from StartMs.
type Series struct {
	StartMs   int64   `json:"start_ms"`
	BucketMs  int64   `json:"bucket_ms"`
	Requests  []int64 `json:"requests"`
	WouldDeny []int64 `json:"would_deny"`
	IdealDeny []int64 `json:"ideal_deny"`
	// Lease is the largest lease batch granted in each bucket.
	Lease []int64 `json:"lease"`
}

// Verdicts of a report, as Verdict returns them and the JSON's "verdict" says.
const (
	VerdictNoThresholds = "no_thresholds" // no --fail-if was given: nothing was checked
	VerdictPass         = "pass"          // every threshold held
	VerdictFail         = "fail"          // a threshold was crossed
)

// Verdict says whether r passed its thresholds, failed them, or had none to pass.
func (r *Report) Verdict() string {
	switch {
	case r.Failed:
		return VerdictFail
	case len(r.Thresholds) == 0:
		return VerdictNoThresholds
	}
	return VerdictPass
}

// Threshold is one evaluated --fail-if expression.
type Threshold struct {
	Expr    string  `json:"expr"`
	Value   float64 `json:"value"`
	Crossed bool    `json:"crossed"`
}

// shown is th's value as the text reports write it: in percent when the threshold was written
// in percent ("false_positive_rate>5%": 13.33%), as stderr names a crossed one, else with digits
// significant digits. JSON keeps the value as it is.
func (th Threshold) shown(digits int) string {
	if strings.HasSuffix(strings.TrimSpace(th.Expr), "%") {
		return strconv.FormatFloat(th.Value*100, 'g', 4, 64) + "%"
	}
	return strconv.FormatFloat(th.Value, 'g', digits, 64)
}

// Finish computes the totals from the rules, keeping the request counts the caller set in
// Totals, and sorts the rules by would-deny, most first.
func (r *Report) Finish() {
	r.Schema = Schema
	t := Totals{}
	for _, rl := range r.Rules {
		t.Decisions += rl.Requests
		t.WouldDeny += rl.WouldDeny
		t.Denied += rl.Denied
		t.IdealDeny += rl.IdealDeny
		t.OverAdmission += rl.OverAdmission
		t.UnderAdmission += rl.UnderAdmission
		t.LegitDenials += rl.LegitDenials
		t.NATCollateral += rl.NATCollateral
		t.FalsePositives += rl.FalsePositives
	}
	t.Matched, t.RequestsWouldDeny, t.RequestsDenied = r.Totals.Matched, r.Totals.RequestsWouldDeny, r.Totals.RequestsDenied
	t.RequestsWithUser = r.Totals.RequestsWithUser
	t.FalsePositiveRate = ratio(t.FalsePositives, t.WouldDeny)
	t.DenyRate = ratio(t.RequestsWouldDeny, r.Requests)
	r.Totals = t
	sort.SliceStable(r.Rules, func(i, j int) bool {
		a, b := r.Rules[i], r.Rules[j]
		if a.WouldDeny != b.WouldDeny {
			return a.WouldDeny > b.WouldDeny
		}
		if a.Domain != b.Domain {
			return a.Domain < b.Domain
		}
		return a.Rule < b.Rule
	})
	if r.Logs == nil {
		r.Logs = []string{}
	}
	if r.BadLineSamples == nil {
		r.BadLineSamples = []BadLine{}
	}
	if r.Thresholds == nil {
		r.Thresholds = []Threshold{}
	}
	if r.UnseenFields == nil {
		r.UnseenFields = []string{}
	}
	if r.Rules == nil {
		r.Rules = []*Rule{}
	}
	for _, rl := range r.Rules {
		if rl.TopDenied == nil {
			rl.TopDenied = []Identity{}
		}
	}
}

// Warnings are what a reader must know to trust the figures, in plain text, for every format
// to show: records a hash or field assignment could not place, records replayed late, and a
// log in which shared-NAT collateral cannot be seen.
func Warnings(r *Report) []string {
	var ws []string
	if r.AssignMissing > 0 {
		goes := "they all went to one gateway"
		if strings.HasPrefix(r.Settings.Assignment, "field:") {
			goes = `they went to a gateway named "unnamed"`
		}
		ws = append(ws, fmt.Sprintf("%d records (%s) lack the field of --assign %s; %s.",
			r.AssignMissing, pct(ratio(r.AssignMissing, r.Requests)), r.Settings.Assignment, goes))
	}
	if r.Reordered > 0 {
		ws = append(ws, fmt.Sprintf("%d records were logged before an earlier one of their log; they were replayed at the later time (the first at %s).", r.Reordered, r.FirstReordered))
	}
	for _, name := range r.EmptyLogs {
		ws = append(ws, fmt.Sprintf("The log %s held no lines.", name))
	}
	for _, spec := range r.UnseenFields {
		_, key, _ := strings.Cut(spec, "=")
		ws = append(ws, fmt.Sprintf("--field %s: no record had a value for the key %q, so that field was empty throughout.", spec, key))
	}
	if r.DeniedKeysDropped > 0 {
		ws = append(ws, fmt.Sprintf("The replay reached its bound on denied keys and forgot the %d with the fewest denials; the top denied identities and NAT collateral leave them out.", r.DeniedKeysDropped))
	}
	if r.NATUntracked > 0 {
		ws = append(ws, fmt.Sprintf("The shared-NAT check reached its bound on addresses; %d sightings of users behind further addresses were not counted, so NAT collateral may be low.", r.NATUntracked))
	}
	if r.Requests > 0 && r.Totals.Matched == 0 {
		ws = append(ws, "No request matched any rule, so every figure is of no rule's traffic (and a --fail-if passes on nothing): check that the log holds the headers, paths and addresses the rules' sources read, and give --field NAME=KEY where its keys differ.")
	}
	if r.Requests > 0 && r.Totals.RequestsWithUser == 0 {
		ws = append(ws, "No request carried a user (a JWT subject or a TLS fingerprint), so shared-NAT collateral cannot be seen in this log.")
	}
	return ws
}

// Formats are the output formats, for -o.
var Formats = []string{"table", "text", "json", "markdown", "html"}

// Write renders r in format (one of Formats; "text" is "table").
func Write(w io.Writer, r *Report, format string) error {
	switch format {
	case "table", "text":
		return WriteTable(w, r)
	case "json":
		return WriteJSON(w, r)
	case "markdown", "md":
		return WriteMarkdown(w, r)
	case "html":
		return WriteHTML(w, r)
	}
	return fmt.Errorf("report: format %q: want table, json, markdown or html", format)
}

// WriteJSON writes r as indented JSON, with its verdict last.
func WriteJSON(w io.Writer, r *Report) error {
	type fields Report // without the methods, so that the embedding adds fields only
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(struct {
		*fields
		Verdict string `json:"verdict"`
	}{(*fields)(r), r.Verdict()})
}

// pct formats a fraction as a percentage.
func pct(f float64) string {
	switch {
	case f == 0:
		return "0%"
	case f < 0.0001:
		return "<0.01%"
	case f < 1 && f > 0.9999:
		return ">99.99%" // 29,999 of 30,000 is not all of them
	}
	return fmt.Sprintf("%.2f%%", f*100)
}

func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}
