package simulate

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/rlctl/rlctl/internal/policyfixture"
	"github.com/rlctl/rlctl/policy"
	"github.com/rlctl/rlctl/simulate/accesslog"
	"github.com/rlctl/rlctl/simulate/report"
	"github.com/rlctl/rlctl/simulate/traffic"
)

func TestRunExample(t *testing.T) {
	if testing.Short() {
		t.Skip("replays 200,000 lines")
	}
	m := examplePolicies(t)
	var log bytes.Buffer
	if err := traffic.Write(&log, traffic.Config{Seed: 1, Lines: 200000}); err != nil {
		t.Fatal(err)
	}
	lat, _ := ParseLatency("1ms", 1)
	r, err := Run(context.Background(), RunConfig{Sim: Config{Model: m, Gateways: 4, Latency: lat}, MaxBad: -1},
		[]Input{{Name: "gen.log", R: &log}})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := r.Requests, int64(200000); got != want {
		t.Errorf("requests: got %d, want %d", got, want)
	}
	// The generated traffic is built to exercise the example policies: the bot's fingerprint,
	// the office's shared subnet and the CGNAT subnets must all be denied somewhere.
	for _, rule := range []string{"anonymous_sessions", "subnet_flood_guard", "developer_free", "anonymous_subnets"} {
		if rl := ruleOf(t, r, rule); rl.WouldDeny == 0 {
			t.Errorf("%s: no denials", rule)
		}
	}
	if r.Totals.LegitDenials == 0 || r.Totals.NATCollateral == 0 {
		t.Errorf("false positives: got legit %d, NAT %d; want both above 0", r.Totals.LegitDenials, r.Totals.NATCollateral)
	}
	for _, f := range report.Formats {
		var out bytes.Buffer
		if err := report.Write(&out, r, f); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

// Run prepares records on its reading goroutine; its report must equal replaying the same
// records one by one with Replay, which reads every field of a record. Field assignment adds
// gateways during the replay; an assignment by a field that the replay otherwise leaves unread
// (replayFields) must read it.
func TestRunMatchesReplay(t *testing.T) {
	m := examplePolicies(t)
	var log bytes.Buffer
	if err := traffic.Write(&log, traffic.Config{Seed: 2, Lines: 20000}); err != nil {
		t.Fatal(err)
	}
	for _, assign := range []string{"round-robin", "field:hostname", "hash:upstream_host", "field:user_agent"} {
		a, err := ParseAssignment(assign)
		if err != nil {
			t.Fatal(err)
		}
		cfg := func() Config {
			lat, _ := ParseLatency("uniform:0.5ms-2ms", 1)
			return Config{Model: m, Gateways: 3, Latency: lat, Assign: a}
		}
		got, err := Run(context.Background(), RunConfig{Sim: cfg(), MaxBad: -1}, []Input{{Name: "gen.log", R: bytes.NewReader(log.Bytes())}})
		if err != nil {
			t.Fatal(err)
		}
		sim, err := New(cfg())
		if err != nil {
			t.Fatal(err)
		}
		opts := accesslog.Options{Headers: append(HeadersFor(m), "hostname")}
		rd, err := accesslog.NewReader("gen.log", bytes.NewReader(log.Bytes()), opts)
		if err != nil {
			t.Fatal(err)
		}
		var rec accesslog.Record
		for rd.Read(&rec) == nil {
			if err := sim.Replay(&rec); err != nil {
				t.Fatal(err)
			}
		}
		want, err := sim.Finish()
		if err != nil {
			t.Fatal(err)
		}
		want.Logs = []string{"gen.log"}
		want.Finish()
		g, _ := json.Marshal(got)
		w, _ := json.Marshal(want)
		if !bytes.Equal(g, w) {
			t.Errorf("%s: Run and Replay reports differ:\nRun:    %.600s\nReplay: %.600s", assign, g, w)
		}
	}
}

// Several logs are replayed merged by time, as one log whose records are in that order: a
// fleet's gateways each write their own log of the same period. The logs here are one
// generated log split by gateway; the expected order is a stable sort by time and then by log.
func TestRunMergesLogs(t *testing.T) {
	m := examplePolicies(t)
	var log bytes.Buffer
	if err := traffic.Write(&log, traffic.Config{Seed: 3, Lines: 20000}); err != nil {
		t.Fatal(err)
	}
	type line struct {
		text  []byte
		ms    int64
		input int
	}
	var lines []line
	var parts [2]bytes.Buffer
	rd, err := accesslog.NewReader("gen.log", bytes.NewReader(log.Bytes()), accesslog.Options{Headers: []string{"hostname"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, text := range bytes.SplitAfter(log.Bytes(), []byte("\n")) {
		if len(text) == 0 {
			continue
		}
		var rec accesslog.Record
		if err := rd.Read(&rec); err != nil {
			t.Fatal(err)
		}
		input := 0
		if host, _ := rec.Header("hostname"); host >= "gw-2" {
			input = 1
		}
		parts[input].Write(text)
		lines = append(lines, line{text, rec.TimeMs, input})
	}
	if parts[0].Len() == 0 || parts[1].Len() == 0 {
		t.Fatal("the generated log has no second gateway")
	}
	sort.SliceStable(lines, func(i, j int) bool {
		if lines[i].ms != lines[j].ms {
			return lines[i].ms < lines[j].ms
		}
		return lines[i].input < lines[j].input
	})
	var merged bytes.Buffer
	for _, l := range lines {
		merged.Write(l.text)
	}
	run := func(inputs ...Input) *report.Report {
		t.Helper()
		lat, _ := ParseLatency("1ms", 1)
		r, err := Run(context.Background(), RunConfig{Sim: Config{Model: m, Gateways: 4, Latency: lat}, MaxBad: -1}, inputs)
		if err != nil {
			t.Fatal(err)
		}
		r.Logs = nil
		return r
	}
	got := run(Input{Name: "a.log", R: &parts[0]}, Input{Name: "b.log", R: &parts[1]})
	want := run(Input{Name: "merged.log", R: &merged})
	if got.Requests != 20000 || got.Reordered != 0 {
		t.Errorf("merged: %d requests, %d reordered; want 20000 and 0", got.Requests, got.Reordered)
	}
	g, _ := json.Marshal(got)
	w, _ := json.Marshal(want)
	if !bytes.Equal(g, w) {
		t.Errorf("two logs and their merge report differently:\ntwo:    %.600s\nmerged: %.600s", g, w)
	}
}

// mergedSource takes the earliest head, the earlier log's on a tie; keeps a log's own order
// when it is out of order; skips bad lines through onBad; and ends when every log has.
func TestMergedSource(t *testing.T) {
	line := func(ts, path string) string {
		return `{"start_time":"2024-05-01T12:00:0` + ts + `Z","path":"` + path + `"}` + "\n"
	}
	logs := []string{
		line("0.000", "/a1") + line("2.000", "/a2") + line("1.000", "/a3-late") + line("3.000", "/a4"),
		line("1.000", "/b1") + "not json\n" + line("2.000", "/b2"),
		"",
		line("0.000", "/d1"),
	}
	var readers []*accesslog.Reader
	for i, l := range logs {
		rd, err := accesslog.NewReader(fmt.Sprintf("log%d", i), strings.NewReader(l), accesslog.Options{Format: "envoy-json"})
		if err != nil {
			t.Fatal(err)
		}
		readers = append(readers, rd)
	}
	var bad []string
	src, err := newMergedSource(readers, func(le *accesslog.LineError) error {
		bad = append(bad, fmt.Sprintf("%s:%d", le.File, le.Line))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	var rec accesslog.Record
	var arena []byte
	for {
		err := src.next(&rec, &arena)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, rec.Path)
	}
	want := []string{"/a1", "/d1", "/b1", "/a2", "/a3-late", "/b2", "/a4"}
	if !slices.Equal(got, want) {
		t.Errorf("order: got %v, want %v", got, want)
	}
	if !slices.Equal(bad, []string{"log1:2"}) {
		t.Errorf("bad lines: got %v, want [log1:2]", bad)
	}
}

// A --field mapping whose key no log had is reported, and one that any log had is not.
func TestRunUnseenFields(t *testing.T) {
	line := func(ts, extra string) string {
		return `{"start_time":"2024-05-01T12:00:0` + ts + `Z","x_forwarded_for":"192.0.2.1"` + extra + "}\n"
	}
	m, err := accesslog.ParseMapping([]string{"x-tenant-id=tenant", "x-api-key=apikey"})
	if err != nil {
		t.Fatal(err)
	}
	r, err := Run(context.Background(), RunConfig{Sim: Config{Model: testModel()}, Log: accesslog.Options{Mapping: m}, MaxBad: -1},
		[]Input{
			{Name: "a.log", R: strings.NewReader(line("0", "") + line("1", ""))},
			{Name: "b.log", R: strings.NewReader(line("0", `,"tenant":"acme"`))},
		})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"x-api-key=apikey"}; !slices.Equal(r.UnseenFields, want) {
		t.Errorf("unseen fields: got %v, want %v", r.UnseenFields, want)
	}
	if ws := report.Warnings(r); len(ws) == 0 || !strings.Contains(strings.Join(ws, "\n"), `no record had a value for the key "apikey"`) {
		t.Errorf("warnings: got %q, want one about apikey", ws)
	}
}

// A replay reads the fields its sources and its gateway assignment need, and not the protocol,
// request ID or upstream host otherwise.
func TestReplayFields(t *testing.T) {
	for _, tt := range []struct {
		assign  string
		headers []string
		want    []string // of protocol, user_agent, request_id, upstream_host
	}{
		{"round-robin", []string{"authorization", "x-tenant-id"}, nil},
		{"round-robin", []string{"authorization", "User-Agent"}, []string{"user_agent"}},
		{"hash:request_id", nil, []string{"request_id"}},
		{"field:upstream_host", []string{"upstream_host"}, []string{"upstream_host"}},
		{"hash:x-node", []string{"x-node"}, nil},
	} {
		a, err := ParseAssignment(tt.assign)
		if err != nil {
			t.Fatal(err)
		}
		fields := replayFields(a, tt.headers)
		var got []string
		for _, f := range []string{"protocol", "user_agent", "request_id", "upstream_host"} {
			if slices.Contains(fields, f) {
				got = append(got, f)
			}
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("%s with headers %q: reads %q of the optional fields, want %q", tt.assign, tt.headers, got, tt.want)
		}
		if !slices.Contains(fields, "start_time") || !slices.Contains(fields, "downstream_remote_address") {
			t.Errorf("%s: fields %q lack the time or the address", tt.assign, fields)
		}
	}
}

// TestHeadersHeldByFields: a source may read a request header that the log reader takes for one
// of its own fields (X-Forwarded-For for the client address, X-Request-Id for the request ID):
// the request has it as a header too, under whichever key the log spells it.
func TestHeadersHeldByFields(t *testing.T) {
	hour := int64(3_600_000)
	rule := func(name, key string) *policy.Rule {
		return &policy.Rule{Name: name, Match: []policy.Match{{Key: key, Kind: policy.MatchAny}}, Stage: policy.Stage{Name: policy.StageEnforce},
			Limits: []policy.Limit{{Requests: 1, WindowMs: hour, Algorithm: policy.FixedWindow, Cost: 1}},
			Lease:  policyfixture.Lease(policyfixture.Bounds(1, 1))}
	}
	m := &policy.Model{Domains: []*policy.Domain{{
		Name: "d",
		Sources: []*policy.Source{
			{Key: "xff", Kind: policy.SourceHeader, Header: "x-forwarded-for"},
			{Key: "rid", Kind: policy.SourceHeader, Header: "X-Request-Id"},
		},
		Rules: []*policy.Rule{rule("per-xff", "xff"), rule("per-rid", "rid")},
	}}}
	log := `{"start_time":"2024-05-01T12:00:00.000Z","path":"/","x_forwarded_for":"1.2.3.4","request_id":"r1"}
{"start_time":"2024-05-01T12:00:00.001Z","path":"/","X-Forwarded-For":"1.2.3.4","x-request-id":"r1"}
{"start_time":"2024-05-01T12:00:00.002Z","path":"/","x-forwarded-for":"1.2.3.4","X-Request-ID":"r1"}
`
	r, err := Run(context.Background(), RunConfig{Sim: Config{Model: m, Gateways: 1}, MaxBad: -1},
		[]Input{{Name: "h.log", R: strings.NewReader(log)}})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"per-xff", "per-rid"} {
		var got *report.Rule
		for _, rl := range r.Rules {
			if rl.Rule == name {
				got = rl
			}
		}
		if got == nil || got.Requests != 3 || got.WouldDeny != 2 {
			t.Errorf("%s: got %+v, want 3 requests, 2 would deny", name, got)
		}
	}
}

// A --field mapping is refused for logs in Envoy's text format, whose fields are fixed, with
// one error whether the format is given or detected; a text log among JSON ones is no error,
// as the mapping is for those.
func TestFieldOnTextLogs(t *testing.T) {
	const textLine = `[2024-05-01T12:00:00.001Z] "GET /a HTTP/1.1" 200 - 0 10 1 - "1.2.3.4" "ua" "id" "host" "10.0.0.1:80"` + "\n"
	const jsonLine = `{"start_time":"2024-05-01T12:00:00.002Z","path":"/a","downstream_remote_address":"1.2.3.4:5","tenant":"acme"}` + "\n"
	const refusal = "t.log: --field does not apply to Envoy's default text format, whose fields are fixed"
	for _, tt := range []struct {
		name    string
		format  accesslog.Format
		logs    []string
		wantErr string
	}{
		{"given", accesslog.FormatEnvoyText, []string{textLine}, refusal},
		{"detected", accesslog.FormatAuto, []string{textLine}, refusal},
		{"detected, two logs", accesslog.FormatAuto, []string{textLine, textLine}, refusal},
		{"detected among JSON", accesslog.FormatAuto, []string{textLine, jsonLine}, ""},
	} {
		var inputs []Input
		for i, l := range tt.logs {
			inputs = append(inputs, Input{Name: []string{"t.log", "u.log"}[i], R: strings.NewReader(l)})
		}
		_, err := Run(context.Background(), RunConfig{Sim: Config{Model: testModel(), Gateways: 1},
			Log: accesslog.Options{Format: tt.format, Mapping: accesslog.Mapping{"x-tenant-id": "tenant"}}}, inputs)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != tt.wantErr {
			t.Errorf("%s: got error %q, want %q", tt.name, got, tt.wantErr)
		}
	}
}
