package simulate

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"github.com/rlctl/rlctl/schema"
	"github.com/rlctl/rlctl/simulate/accesslog"
	"github.com/rlctl/rlctl/simulate/report"
	"github.com/rlctl/rlctl/simulate/traffic"
)

func TestRunExample(t *testing.T) {
	if testing.Short() {
		t.Skip("replays 200,000 lines")
	}
	m, err := schema.Load("../policies")
	if err != nil {
		t.Fatal(err)
	}
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
// records one by one with Replay. Field assignment adds gateways during the replay.
func TestRunMatchesReplay(t *testing.T) {
	m, err := schema.Load("../policies")
	if err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	if err := traffic.Write(&log, traffic.Config{Seed: 2, Lines: 20000}); err != nil {
		t.Fatal(err)
	}
	for _, assign := range []string{"round-robin", "field:hostname"} {
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
